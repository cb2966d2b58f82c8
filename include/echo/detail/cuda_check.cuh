// Host-side CUDA / NCCL call checking: setup code throws echo::error naming the call.
#pragma once

#include "../error.cuh"

#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

namespace echo::detail {

inline void throw_cuda(cudaError_t e, const char* call, const char* file, int line) {
  (void)cudaGetLastError();  // leave no sticky-looking error behind for the caller
  throw ::echo::error(call, std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e), file, line);
}

}  // namespace echo::detail

/// Evaluate a CUDA runtime call; throw echo::error naming it on failure.
#define ECHO_CUDA_TRY(expr)                                                           \
  do {                                                                                \
    cudaError_t echo_err_ = (expr);                                                   \
    if (echo_err_ != cudaSuccess) ::echo::detail::throw_cuda(echo_err_, #expr, __FILE__, __LINE__); \
  } while (0)

/// Evaluate an NCCL call; throw echo::error naming it on failure.
#define ECHO_NCCL_TRY(expr)                                                                      \
  do {                                                                                           \
    ncclResult_t echo_res_ = (expr);                                                             \
    if (echo_res_ != ncclSuccess)                                                                \
      throw ::echo::error(#expr, std::string("NCCL: ") + ncclGetErrorString(echo_res_), __FILE__, __LINE__); \
  } while (0)
