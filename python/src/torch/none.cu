// Torch table entries: quant::none (the 16-bit path), every compensator, cuda_ipc.
#include "instance.cuh"

namespace echo_py::torch_ops {

void add_none(std::vector<entry>& table) { add_family<echo::transport::cuda_ipc>(table, none_family{}); }

}  // namespace echo_py::torch_ops
