// The table of compiled echo::all_reduce instantiations the torch ops choose from by name
// (docs/python.md): the pairs of echo/registry.cuh marked tool::torch over transport::cuda_ipc and
// tool::torch_nccl over transport::nccl.
#include "instance.hpp"

// add_shard_shards: every shard's add_shard, generated (cmake/echo-shards.cmake).
#include "shards.inc"

#include <algorithm>
#include <stdexcept>

namespace echo_py::torch_ops {

const std::vector<entry>& table() {
  static const std::vector<entry> t = [] {
    std::vector<entry> v;
    for (auto add : add_shard_shards) add(v);
    std::sort(v.begin(), v.end(), [](const entry& a, const entry& b) { return a.name.order < b.name.order; });
    return v;
  }();
  return t;
}

const entry& find(const std::string& quant, int bits, int group, bool rotate, int clip, const std::string& comp,
                  const std::string& storage, const std::string& transport, bool sequence_parallel) {
  for (const entry& e : table())
    if (transport == e.transport && matches(e.name, quant, bits, group, rotate, clip, comp, storage) &&
        (e.sequence_parallel || !sequence_parallel))
      return e;
  throw no_entry("echo", quant, bits, group, rotate, clip, comp, storage,
                 " transport='" + transport + "'" + (sequence_parallel ? " serving sequence_parallel" : "") +
                     "; compiled: torch.ops.echo.instantiations()");
}

}  // namespace echo_py::torch_ops
