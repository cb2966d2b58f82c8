// echo::chain<Comp>: one rank's device-side compensation state for one chain of all-reduces.
#pragma once

#include "comp/none.cuh"
#include "detail/cuda_check.cuh"
#include "dtype.cuh"

namespace echo {

/// Holds `capacity` stored errors of Comp::storage on the current device. A chain is the run of
/// calls that add into one residual stream: call reset() at a pass boundary. A call with a
/// different n resets the chain first (a shape change ends it). Not copyable; movable.
template <class Comp>
class chain {
 public:
  using storage = typename Comp::storage;
  static_assert(Comp::enabled, "echo::chain: comp::none keeps no state (pass no chain)");

  explicit chain(size_t capacity) : capacity_(capacity) {
    ECHO_CUDA_TRY(cudaGetDevice(&device_));
    if (capacity) ECHO_CUDA_TRY(cudaMalloc(&data_, capacity * sizeof(storage)));
    if (capacity) ECHO_CUDA_TRY(cudaMemset(data_, 0, capacity * sizeof(storage)));
  }
  chain(chain&& o) noexcept : data_(o.data_), capacity_(o.capacity_), n_(o.n_), device_(o.device_) { o.data_ = nullptr; }
  chain(const chain&) = delete;
  chain& operator=(const chain&) = delete;
  ~chain() {
    if (data_) (void)cudaFree(data_);
  }

  /// End the chain (stream-ordered): the next call starts from zero errors.
  cudaError_t reset(cudaStream_t stream) {
    const cudaError_t e = n_ ? cudaMemsetAsync(data_, 0, n_ * sizeof(storage), stream) : cudaSuccess;
    n_ = 0;
    return e;
  }

  size_t capacity() const { return capacity_; }
  size_t size() const { return n_; }
  int device() const { return device_; }
  storage* data() const { return data_; }

  /// Used by all_reduce: begin a call on n elements (resets on a shape change).
  cudaError_t begin(size_t n, cudaStream_t stream) {
    if (n == n_) return cudaSuccess;
    const cudaError_t e = reset(stream);
    n_ = n;
    return e;
  }

 private:
  storage* data_ = nullptr;
  size_t capacity_ = 0;
  size_t n_ = 0;
  int device_ = 0;
};

}  // namespace echo
