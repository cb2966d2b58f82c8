// Programmatic dependent launch (sm_90): a kernel launched this way may be scheduled while the
// kernel ahead of it in the stream is still finishing, so its launch overlaps that kernel's
// completion instead of following it. The kernel must call wait_prior_grid() before it touches
// any memory: that waits until the kernel ahead has completed and its writes are visible, which
// keeps stream order for everything after it. Below sm_90 both are plain stream order.
#pragma once

#include "../config.cuh"

#if ECHO_HAS_CUDA
#include <cuda_runtime.h>
#endif

#include <utility>

namespace echo::detail {

#if ECHO_HAS_CUDA

/// First statement of a kernel launched by launch_dependent: waits for the grid ahead of it in
/// the stream (all its blocks exited, its memory flushed). No-op below sm_90 and when the launch
/// was not programmatic.
__device__ __forceinline__ void wait_prior_grid() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/// Whether Kernel may be launched programmatically: it was compiled for sm_90 or newer (PTX
/// version, not the device's: code built for compute_80 and JIT-compiled on an H200 has no
/// wait_prior_grid() in it and must keep full stream order). Queried once per kernel; Echo
/// assumes one GPU model in a process, as for its occupancy queries.
template <auto Kernel>
bool waits_for_prior_grid() {
  static const bool yes = [] {
    cudaFuncAttributes a{};
    if (cudaFuncGetAttributes(&a, Kernel) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return a.ptxVersion >= 90;
  }();
  return yes;
}

/// kernel<<<grid, threads, 0, stream>>>(args...), marked as allowed to launch before the kernel
/// ahead of it completes when `programmatic` (the device is sm_90 or newer). Echo's kernels issue
/// no explicit trigger (griddepcontrol.launch_dependents): the kernel ahead releases its
/// dependents as its last block exits, so a persistent grid never shares the GPU with the next
/// one before it has finished its work (the ranks of one GPU rely on it: their grids must all be
/// resident at once). Releasing at once with one rank a GPU was measured slower, 0.5 us a call
/// at 4-16 MiB and up to 2 % from 256 MiB (docs/tuning.md).
template <class... Params, class... Args>
cudaError_t launch_dependent(void (*kernel)(Params...), int grid, int threads, cudaStream_t stream, bool programmatic,
                             Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(grid));
  cfg.blockDim = dim3(static_cast<unsigned>(threads));
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = programmatic ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

#endif

}  // namespace echo::detail
