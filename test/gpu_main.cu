// The doctest main of Echo's GPU tests. ECHO_TEST_MIN_GPUS (set by echo_add_gpu_test) is the
// number of GPUs the test needs; with fewer the executable prints why and exits with 77, which
// CTest reports as skipped (SKIP_RETURN_CODE).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <cstdio>

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
  if (count < ECHO_TEST_MIN_GPUS) {
    std::printf("SKIPPED: needs %d GPUs, found %d\n", ECHO_TEST_MIN_GPUS, count);
    std::fflush(stdout);
    return 77;
  }
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  return context.run();
}
