// Reference table entries: naive_zero_point.
#include "table.hpp"

namespace echo_py::ref {

void add_naive_zero_point(std::vector<entry>& table) { add_family(table, naive_zero_point_family{}); }

}  // namespace echo_py::ref
