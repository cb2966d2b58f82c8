// Reference table entries: zero_aware, 4 and 8 bits, groups 32 / 64 / 128 (docs/python.md).
#include "table.hpp"

namespace echo_py::ref {

void add_zero_aware(std::vector<entry>& table) {
  using echo::quant::zero_aware;
  add<zero_aware<4, 32>>(table);
  add<zero_aware<4, 64>>(table);
  add<zero_aware<4, 128>>(table);
  add<zero_aware<8, 32>>(table);
  add<zero_aware<8, 64>>(table);
  add<zero_aware<8, 128>>(table);
}

}  // namespace echo_py::ref
