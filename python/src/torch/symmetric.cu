// Torch table entries: symmetric, every compensator, cuda_ipc.
#include "instance.cuh"

namespace echo_py::torch_ops {

void add_symmetric(std::vector<entry>& table) { add_family<echo::transport::cuda_ipc>(table, symmetric_family{}); }

}  // namespace echo_py::torch_ops
