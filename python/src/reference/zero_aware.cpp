// Reference table entries: zero_aware, 4 and 8 bits, groups 32 / 64 / 128.
#include "table.hpp"

namespace echo_py::ref {

void add_zero_aware(std::vector<entry>& table) {
  add_family(table, zero_aware_4{});
  add_family(table, zero_aware_8{});
}

}  // namespace echo_py::ref
