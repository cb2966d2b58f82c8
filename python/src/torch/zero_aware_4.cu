// Torch table entries: zero_aware 4-bit, groups 32 / 64 / 128, every compensator, cuda_ipc.
// (zero_aware is split by bits into two translation units: it is most of the table's build.)
#include "instance.cuh"

namespace echo_py::torch_ops {

void add_zero_aware_4(std::vector<entry>& table) { add_family<echo::transport::cuda_ipc>(table, zero_aware_4{}); }

}  // namespace echo_py::torch_ops
