// Reference table entries: the outlier-robust 4-bit path (rotated, clipped, both) and its 8-bit code.
#include "table.hpp"

namespace echo_py::ref {

void add_outlier(std::vector<entry>& table) { add_family(table, outlier_family{}); }

}  // namespace echo_py::ref
