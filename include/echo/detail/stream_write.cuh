// A 64-bit word written in stream order without a kernel: cuStreamWriteValue64, a stream memory
// operation the GPU's front end executes, where cudaMemsetAsync launches a kernel. On H200 the
// kernel costs about 3 us between two NCCL calls; the write costs a fraction (docs/benchmarks.md).
// The driver entry point is looked up through the runtime, so nothing links libcuda; where the
// runtime, the driver or the device lacks the operation, the write falls back to the memset.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace echo::detail {

class stream_write {
 public:
  stream_write() {
#if CUDART_VERSION >= 12050
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", &fn, 12000, cudaEnableDefault, &found) == cudaSuccess &&
        found == cudaDriverEntryPointSuccess)
      write_ = reinterpret_cast<write_fn>(fn);
    (void)cudaGetLastError();
#endif
  }

  /// *word = value once the stream's earlier work is done; capturable in a CUDA graph.
  cudaError_t operator()(uint64_t* word, uint64_t value, cudaStream_t stream) {
    if (write_ && write_(reinterpret_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(word), value, 0) == CUDA_SUCCESS)
      return cudaSuccess;
    write_ = nullptr;  // refused (a device without stream memory operations): memset from now on
    if (value != 0) return cudaErrorNotSupported;
    return cudaMemsetAsync(word, 0, sizeof(uint64_t), stream);
  }

 private:
  using write_fn = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);
  write_fn write_ = nullptr;
};

}  // namespace echo::detail
