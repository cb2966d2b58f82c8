// echo-sim: make_reducer over the generated shards (examples/CMakeLists.txt), and the names the
// command line accepts, read off the registry.
#include "reducer.hpp"

// make_in_shard_<i> of every shard, and make_in_shard_shards, an array of them: generated
// (cmake/echo-shards.cmake).
#include "shards.inc"

#include <algorithm>

namespace echo_sim {

std::unique_ptr<reducer> make_reducer(const request& r) {
  for (auto make : make_in_shard_shards)
    if (auto p = make(r)) return p;
  std::string what = "echo-sim: no compiled reducer for --quant " + r.quant;
  if (r.quant != "none") what += " --bits " + std::to_string(r.bits) + " --group " + std::to_string(r.group);
  what += " --comp " + r.comp;
  if (r.coll == collective::reduce_scatter) what += " --collective reduce_scatter";
  throw std::invalid_argument(what + " (the ef_* storages are built at 4 and 8 bits of quantizers marked "
                                     "tool::sim_storage in echo/registry.cuh; ef_step8 and ef_step4 not for the "
                                     "reduce-scatter, whose own segments have no step)");
}

namespace {
/// The names of the quantizers marked with every bit of Tools.
template <unsigned Tools>
std::vector<std::string> quantizers_marked() {
  std::vector<std::string> v;
  echo::for_each_registered<Tools, echo::registered_quantizers>(
      [&](auto e, std::size_t) { v.push_back(decltype(e)::type::name); });
  return v;
}
}  // namespace

std::vector<std::string> quant_names() { return quantizers_marked<echo::tool::sim>(); }

std::vector<std::string> storage_quant_names() { return quantizers_marked<echo::tool::sim | echo::tool::sim_storage>(); }

std::vector<std::string> comp_names() {
  std::vector<std::string> v;
  echo::for_each_registered<0u, echo::registered_compensators>([&](auto e, std::size_t) {
    if (decltype(e)::tools & (echo::tool::sim | echo::tool::sim_storage)) v.push_back(comp_label<typename decltype(e)::type>());
  });
  return v;
}

}  // namespace echo_sim
