// Reference table entries: symmetric.
#include "table.hpp"

namespace echo_py::ref {

void add_symmetric(std::vector<entry>& table) { add_family(table, symmetric_family{}); }

}  // namespace echo_py::ref
