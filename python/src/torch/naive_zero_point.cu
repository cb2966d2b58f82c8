// Torch table entries: naive_zero_point, every compensator, cuda_ipc.
#include "instance.cuh"

namespace echo_py::torch_ops {

void add_naive_zero_point(std::vector<entry>& table) {
  add_family<echo::transport::cuda_ipc>(table, naive_zero_point_family{});
}

}  // namespace echo_py::torch_ops
