// Uses the installed Echo from CUDA code: the umbrella (with the device path under nvcc)
// compiles in an outside project, and echo::echo alone brings CUDA's runtime and NCCL. Needs no
// GPU: it instantiates a whole all-reduce (its kernels are compiled and linked) and asks the
// runtime and NCCL for their versions.
#include <echo/echo.cuh>

#include <cstdio>
#include <memory>

static_assert(ECHO_HAS_CUDA, "nvcc compiles this file: echo.cuh must include the device path");

using AR = echo::all_reduce<echo::quant::zero_aware<4, 128>, echo::transport::cuda_ipc::tag,
                            echo::comp::error_feedback<echo::bfloat16_t>>;

// Not called: they make nvcc instantiate the constructor and the call, kernels included.
std::unique_ptr<AR> make(const echo::communicator& comm, size_t n) { return std::make_unique<AR>(comm, n); }
echo::status call(AR& ar, echo::bfloat16_t* x, size_t n, cudaStream_t s, AR::chain_type* chain) {
  return ar(x, x, n, s, chain);
}

int main() {
  int runtime = 0, nccl = 0, gpus = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess || ncclGetVersion(&nccl) != ncclSuccess) {
    std::printf("FAIL: the CUDA runtime or NCCL did not answer\n");
    return 1;
  }
  if (cudaGetDeviceCount(&gpus) != cudaSuccess) gpus = 0;  // no driver or no GPU: fine here
  (void)cudaGetLastError();
  std::printf("echo %d.%d.%d device consumer: ok (CUDA runtime %d, NCCL %d, %d GPUs)\n", ECHO_VERSION_MAJOR,
              ECHO_VERSION_MINOR, ECHO_VERSION_PATCH, runtime, nccl, gpus);
  return 0;
}
