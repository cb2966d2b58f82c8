// Torch table entries over transport::nccl: common/quantizers.hpp's nccl_quantizers, every compensator.
#include "instance.cuh"

namespace echo_py::torch_ops {

void add_nccl(std::vector<entry>& table) { add_family<echo::transport::nccl>(table, nccl_quantizers{}); }

}  // namespace echo_py::torch_ops
