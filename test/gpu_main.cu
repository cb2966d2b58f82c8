// The doctest main of Echo's GPU tests. ECHO_TEST_MIN_GPUS (set by echo_add_gpu_test) is the
// number of GPUs the test needs; with fewer the executable prints why and exits with 77, which
// CTest reports as skipped (SKIP_RETURN_CODE). ECHO_TEST_RANKS=P (P >= ECHO_TEST_MIN_GPUS) places
// P ranks over whatever GPUs there are (rank r on GPU r % GPUs), so one GPU is enough then: a
// machine of one GPU runs the multi-rank tests as ranks sharing it (support/gpu_harness.cuh).
// Cases that need a GPU a rank (NCCL's) still report themselves skipped.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#ifndef ECHO_TEST_MIN_GPUS
#error "ECHO_TEST_MIN_GPUS must be defined (echo_add_gpu_test sets it)"
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
  const char* ranks = std::getenv("ECHO_TEST_RANKS");
  const bool shared = ranks && std::atoi(ranks) >= ECHO_TEST_MIN_GPUS;
  const int need = shared ? 1 : ECHO_TEST_MIN_GPUS;
  if (count < need) {
    std::printf("SKIPPED: needs %d GPUs, found %d%s\n", need, count, shared ? " (ECHO_TEST_RANKS set)" : "");
    std::fflush(stdout);
    return 77;
  }
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  return context.run();
}
