// echo-sim: the echo::quant::symmetric instantiations (every bits x group x compensator).
#include "reducer.hpp"

namespace echo_sim {
std::unique_ptr<reducer> make_symmetric(int bits, int group, comp_kind c, const make_args& a) {
  return make_bits<echo::quant::symmetric>(bits, group, c, a);
}
}  // namespace echo_sim
