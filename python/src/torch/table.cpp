// The table of compiled echo::all_reduce instantiations the torch ops choose from by name
// (docs/python.md lists it): every quantizer of common/quantizers.hpp with every compensator of
// common/compensators.hpp over transport::cuda_ipc, and nccl_quantizers over transport::nccl.
#include "instance.hpp"

#include <sstream>
#include <stdexcept>

namespace echo_py::torch_ops {

const std::vector<entry>& table() {
  static const std::vector<entry> t = [] {
    std::vector<entry> v;
    add_zero_aware_4(v);
    add_zero_aware_8(v);
    add_symmetric(v);
    add_naive_zero_point(v);
    add_none(v);
    add_nccl(v);
    return v;
  }();
  return t;
}

const entry& find(const std::string& quant, int bits, int group, const std::string& comp, const std::string& storage,
                  const std::string& transport) {
  const bool none_q = quant == "none", none_c = comp == "none";
  for (const entry& e : table())
    if (quant == e.quant && (none_q || (bits == e.bits && group == e.group)) && comp == e.comp &&
        (none_c || storage == e.storage) && transport == e.transport)
      return e;
  std::ostringstream msg;
  msg << "echo: no compiled instantiation quant='" << quant << "'";
  if (!none_q) msg << " bits=" << bits << " group_size=" << group;
  msg << " comp='" << comp << "'";
  if (!none_c) msg << " storage='" << storage << "'";
  msg << " transport='" << transport << "'; compiled: torch.ops.echo.instantiations()";
  throw std::invalid_argument(msg.str());
}

}  // namespace echo_py::torch_ops
