// Torch table entries: zero_aware 8-bit, groups 32 / 64 / 128, every compensator, cuda_ipc.
#include "instance.cuh"

namespace echo_py::torch_ops {

void add_zero_aware_8(std::vector<entry>& table) { add_family<echo::transport::cuda_ipc>(table, zero_aware_8{}); }

}  // namespace echo_py::torch_ops
