// The doctest main of Echo's GPU tests. ECHO_TEST_MIN_GPUS (set by echo_add_gpu_test) is the
// number of ranks the test needs, one a GPU by default; with fewer GPUs the executable prints why
// and exits with 77, which CTest reports as skipped (SKIP_RETURN_CODE). ECHO_TEST_RANKS=P places P
// ranks over whatever GPUs there are (rank r on GPU r % GPUs), so one GPU is enough then: a
// machine of one GPU runs the multi-rank tests as ranks sharing it (support/gpu_harness.cuh),
// except tests built with ECHO_TEST_GPU_PER_RANK (NCCL's: it refuses two ranks on one GPU), which
// need P GPUs. P below ECHO_TEST_MIN_GPUS is skipped too: such a run would test no exchange.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#if !defined(ECHO_TEST_MIN_GPUS) || !defined(ECHO_TEST_GPU_PER_RANK)
#error "ECHO_TEST_MIN_GPUS and ECHO_TEST_GPU_PER_RANK must be defined (echo_add_gpu_test sets them)"
#endif

int main(int argc, char** argv) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    // No driver, no device, ...: the probe's error must not leak into the tests' error checks.
    std::printf("cudaGetDeviceCount: %s\n", cudaGetErrorString(e));
    count = 0;
  }
  (void)cudaGetLastError();
  const char* env = std::getenv("ECHO_TEST_RANKS");
  const int ranks = env ? std::atoi(env) : 0;  // 0: one rank a GPU
  if (env && ranks < ECHO_TEST_MIN_GPUS) {
    std::printf("SKIPPED: ECHO_TEST_RANKS=%s, the test needs at least %d ranks\n", env, ECHO_TEST_MIN_GPUS);
    std::fflush(stdout);
    return 77;
  }
  const int need = !env ? ECHO_TEST_MIN_GPUS : ECHO_TEST_GPU_PER_RANK ? ranks : 1;
  if (count < need) {
    std::printf("SKIPPED: needs %d GPUs, found %d%s\n", need, count,
                env ? (ECHO_TEST_GPU_PER_RANK ? " (a GPU a rank, ECHO_TEST_RANKS set)" : " (ECHO_TEST_RANKS set)") : "");
    std::fflush(stdout);
    return 77;
  }
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  return context.run();
}
