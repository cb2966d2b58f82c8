// Reference table entries: quant::none (the 16-bit path: no quantization).
#include "table.hpp"

namespace echo_py::ref {

void add_none(std::vector<entry>& table) { add_family(table, none_family{}); }

}  // namespace echo_py::ref
