// The second translation unit of collective/multi_tu (see multi_tu_a.cu).
#include <echo/echo.cuh>

int multi_tu_b(const echo::communicator& c) {
  echo::all_reduce<echo::quant::zero_aware<4, 128>, echo::transport::cuda_ipc::tag, echo::comp::error_feedback<>> ar(c, 1000);
  echo::chain<echo::comp::error_feedback<>> ch(1000);
  float* x = nullptr;
  if (cudaMalloc(&x, 1000 * sizeof(float)) != cudaSuccess) return 1;
  const echo::status s = ar(x, x, 1000, nullptr, &ch);
  cudaFree(x);
  return s == echo::status::success ? 0 : 1;
}
