// Loading kernels at construction instead of at their first launch.
#pragma once

#include "cuda_check.cuh"

#include <cuda_runtime.h>

namespace echo::detail {

/// Loads each kernel into the current device's context now. Under lazy loading (CUDA's default
/// since 12.2) a kernel is loaded at its first launch, and loading may synchronize the context
/// (CUDA programming guide, "Lazy Loading", concurrent execution). With two ranks on one GPU in
/// one process that deadlocks until the spin limit: rank A's pipeline kernel spins on a flag that
/// rank B's first launch of a kernel would set, and that launch waits for the context to go idle.
/// cudaFuncGetAttributes loads the kernel; engines call this from their (collective) constructor.
inline void preload_kernel(const void* kernel) {
  cudaFuncAttributes attr{};
  ECHO_CUDA_TRY(cudaFuncGetAttributes(&attr, kernel));
}

template <class... Kernels>
void preload_kernels(Kernels... kernels) {
  (preload_kernel(reinterpret_cast<const void*>(kernels)), ...);
}

}  // namespace echo::detail
