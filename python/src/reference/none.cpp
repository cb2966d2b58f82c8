// Reference table entries: quant::none (the 16-bit path: no quantization).
#include "table.hpp"

namespace echo_py::ref {

void add_none(std::vector<entry>& table) { add<echo::quant::none>(table); }

}  // namespace echo_py::ref
