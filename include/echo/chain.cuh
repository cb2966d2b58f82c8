// A chain's compensation state: chain_view (caller-owned memory) and chain (owned).
//
// A chain is the run of all-reduces that add into one residual stream (one forward pass, one
// backward pass): its state holds the errors this rank injected on the chain's last call. The
// memory layout is comp/compensator.cuh's: a header, then the stored errors; all-zero memory is a
// fresh chain. The device decides from the header whether a call continues the chain (same n as
// the last call that kept errors) or starts a fresh one, so a call captured in a CUDA graph behaves
// on every replay as the same call made directly. Calls that keep no errors (the one-shot and
// NCCL's exact path below the dispatch size) leave the chain untouched: its errors carry over them
// to its next call of the same n, so reset a chain at a pass boundary.
#pragma once

#include "comp/compensator.cuh"
#include "comp/none.cuh"
#include "detail/blocking_copy.cuh"
#include "detail/cuda_check.cuh"
#include "detail/device_guard.cuh"
#include "dtype.cuh"

#include <utility>

namespace echo {

template <class Quant, class Transport, class Comp, class Policy, class Ops>
class all_reduce;

/// A non-owning view of a chain's state in caller memory (e.g. a torch uint8 tensor of
/// bytes_for(n) bytes on the rank's GPU, so the framework owns it and a graph captures it at a
/// fixed address). Reset it by zeroing the memory (torch: `state.zero_()`).
template <class Comp>
class chain_view {
 public:
  chain_view() = default;
  chain_view(void* data, size_t bytes, int device) : data_(static_cast<unsigned char*>(data)), bytes_(bytes), device_(device) {}

  /// State bytes a chain of n elements needs (0 for a compensator without state).
  static size_t bytes_for(size_t n) { return Comp::state_bytes(n); }

  unsigned char* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  int device() const { return device_; }
  /// Whether a call on n elements fits.
  bool fits(size_t n) const { return data_ != nullptr && bytes_for(n) <= bytes_; }
  /// The largest n that fits.
  size_t capacity() const {
    if (!data_ || bytes_ < bytes_for(1)) return 0;
    size_t lo = 1, hi = 2 * bytes_;  // bytes_for(n) > n / 2 for every storage with state (4-bit codes: n / 2 + n / 16)
    while (lo < hi) {
      const size_t mid = lo + (hi - lo + 1) / 2;
      if (bytes_for(mid) <= bytes_) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }

 private:
  unsigned char* data_ = nullptr;
  size_t bytes_ = 0;
  int device_ = -1;
};

/// A chain's state in memory it owns, on the device current at construction. Not copyable;
/// movable (a moved-from chain has no memory and capacity 0, so calls reject it).
template <class Comp>
class chain {
  static_assert(Comp::keeps_state, "echo::chain: this compensator keeps no state (pass no chain)");

 public:
  explicit chain(size_t capacity) : capacity_(capacity) {
    ECHO_CUDA_TRY(cudaGetDevice(&device_));
    bytes_ = Comp::state_bytes(capacity);
    ECHO_CUDA_TRY(cudaMalloc(&data_, bytes_));
    ECHO_CUDA_TRY(detail::write_device_now(data_, nullptr, bytes_));  // done before any call reads it
  }
  chain(chain&& o) noexcept { swap(o); }
  chain& operator=(chain&& o) noexcept {
    chain tmp(std::move(o));
    swap(tmp);
    return *this;
  }
  chain(const chain&) = delete;
  chain& operator=(const chain&) = delete;
  ~chain() {
    if (data_) {
      detail::device_guard g(device_);
      (void)cudaFree(data_);
    }
  }

  /// End the chain (stream-ordered; captured into a graph, every replay ends it): the next call
  /// starts from zero errors.
  cudaError_t reset(cudaStream_t stream) {
    pending_ = false;
    if (!data_) return cudaSuccess;
    detail::device_guard g(device_);
    return cudaMemsetAsync(data_, 0, sizeof(comp::state_header::tag), stream);
  }

  size_t capacity() const { return capacity_; }
  int device() const { return device_; }
  chain_view<Comp> view() const { return {data_, data_ ? bytes_ : 0, device_}; }
  /// Whether a state_update::deferred call on this chain awaits its update().
  bool update_pending() const { return pending_; }

 private:
  // echo::all_reduce keeps the deferred call it awaits an update() for, so that it reports misuse
  // (an update of another n or type, a call before the update) synchronously; the device guards
  // the state regardless (comp::state_header).
  template <class, class, class, class, class>
  friend class all_reduce;
  void mark_pending(size_t n, dtype t) {
    pending_ = true;
    pending_n_ = n;
    pending_type_ = t;
  }
  void clear_pending() { pending_ = false; }
  size_t pending_n() const { return pending_n_; }
  dtype pending_type() const { return pending_type_; }

  void swap(chain& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(bytes_, o.bytes_);
    std::swap(capacity_, o.capacity_);
    std::swap(device_, o.device_);
    std::swap(pending_, o.pending_);
    std::swap(pending_n_, o.pending_n_);
    std::swap(pending_type_, o.pending_type_);
  }

  unsigned char* data_ = nullptr;
  size_t bytes_ = 0;
  size_t capacity_ = 0;
  int device_ = -1;
  bool pending_ = false;  ///< a deferred call awaits update(): the call on pending_n_ elements of pending_type_
  size_t pending_n_ = 0;
  dtype pending_type_ = dtype::f32;
};

}  // namespace echo
