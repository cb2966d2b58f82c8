// echo-sim: the echo::quant::naive_zero_point instantiations (every bits x group x compensator).
#include "reducer.hpp"

namespace echo_sim {
std::unique_ptr<reducer> make_naive_zero_point(int bits, int group, comp_kind c, const make_args& a) {
  return make_bits<echo::quant::naive_zero_point>(bits, group, c, a);
}
}  // namespace echo_sim
