// Setup writes to device memory that are complete when they return. cudaMemcpy from pageable
// memory and cudaMemset may return before the device memory holds the bytes (CUDA's "API
// synchronization behavior"), and a call the caller then makes on a non-blocking stream does not
// wait for them. These run on a stream of their own and wait for it, so they neither wait behind
// nor hold up the caller's other work.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace echo::detail {

/// Copy `bytes` from host memory to the device, or set them to zero (src null); done on return.
inline cudaError_t write_device_now(void* dst, const void* src, size_t bytes) {
  cudaStream_t s = nullptr;
  cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e != cudaSuccess) return e;
  e = src ? cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s) : cudaMemsetAsync(dst, 0, bytes, s);
  const cudaError_t w = cudaStreamSynchronize(s);
  (void)cudaStreamDestroy(s);
  return e != cudaSuccess ? e : w;
}

}  // namespace echo::detail
