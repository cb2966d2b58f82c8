// echo-sim: the echo::quant::zero_aware instantiations (every bits x group x compensator).
#include "reducer.hpp"

namespace echo_sim {
std::unique_ptr<reducer> make_zero_aware(int bits, int group, comp_kind c, const make_args& a) {
  return make_bits<echo::quant::zero_aware>(bits, group, c, a);
}
}  // namespace echo_sim
