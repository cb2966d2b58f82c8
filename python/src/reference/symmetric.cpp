// Reference table entries: symmetric, 4 bits, group 128.
#include "table.hpp"

namespace echo_py::ref {

void add_symmetric(std::vector<entry>& table) { add<echo::quant::symmetric<4, 128>>(table); }

}  // namespace echo_py::ref
