// Reference table entries: naive_zero_point, 4 bits, group 128.
#include "table.hpp"

namespace echo_py::ref {

void add_naive_zero_point(std::vector<entry>& table) { add<echo::quant::naive_zero_point<4, 128>>(table); }

}  // namespace echo_py::ref
