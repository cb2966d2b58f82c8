// Two translation units that include the umbrella header, linked into one program: a real
// project (a PyTorch extension, say) has several, and a non-inline definition in a header breaks
// the link ("multiple definition"). multi_tu_b.cu instantiates the same types.
#include "support/gpu_harness.cuh"

int multi_tu_b(const echo::communicator& c);  // multi_tu_b.cu

TEST_CASE("the umbrella header links from two translation units, and both work") {
  auto comms = echo::communicator::local({0}, false);
  echo::all_reduce<echo::quant::zero_aware<4, 128>, echo::transport::cuda_ipc::tag, echo::comp::error_feedback<>> ar(comms[0], 1000);
  echo::chain<echo::comp::error_feedback<>> ch(1000);
  echo_test::device_buffer<float> x(0, 1000);
  CHECK(ar(x.ptr, x.ptr, 1000, nullptr, &ch) == echo::status::success);
  CHECK(multi_tu_b(comms[0]) == 0);
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
}
