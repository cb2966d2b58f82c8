// Device-side synchronisation between ranks: flags that carry (epoch, call signature).
//
// Memory-ordering contract (PTX memory model, system scope because the peer is another GPU or
// another process):
//  - publish: the lanes of a warp store their data, __syncwarp() makes those stores happen-before
//    lane 0, and lane 0 stores the flag with a release at system scope (cumulative), so a peer
//    that observes the flag with an acquire observes all of the warp's data.
//  - wait: lane 0 polls with an acquire at system scope; the caller's __syncwarp() extends it to
//    the warp before any lane reads the data. Data a peer wrote is read with ld.global.cg.
//
// A flag is one 64-bit word: the launch epoch in the high half and the call signature (a hash of
// n, element type and configuration, identical on every rank that makes the same call) in the low
// half. Flags live in a region fixed at construction, each address with one role for the object's
// life, so a flag can only ever hold a flag value of an earlier or the current launch: an earlier
// epoch is never taken for the current one, and an equal epoch with another signature is a
// mismatched call (different n, type or configuration on some rank), never data.
#pragma once

#include "../config.cuh"

#if ECHO_HAS_CUDA
#include <cuda/atomic>
#endif

namespace echo::detail {

/// The words at the start of every rank's workspace (all u32).
struct sync_words {
  static constexpr int epoch = 0;  ///< the last launch this rank completed (advanced by its last block)
  static constexpr int done = 1;   ///< blocks of the current launch that finished
  static constexpr int abort = 2;  ///< non-zero: an echo::status code; set locally or by a peer
  static constexpr size_t bytes = 256;
};

/// How a wait ended. pending: not yet (only from judge()).
enum class wait_result : int { ok, pending, mismatch, abort, timeout };

ECHO_HD uint64_t flag_value(uint32_t epoch, uint32_t sig) { return (static_cast<uint64_t>(epoch) << 32) | sig; }

#if ECHO_HAS_CUDA

__device__ __forceinline__ void flag_publish(uint64_t* flag, uint64_t v) {
  cuda::atomic_ref<uint64_t, cuda::thread_scope_system>(*flag).store(v, cuda::memory_order_release);
}

__device__ __forceinline__ uint64_t flag_observe(const uint64_t* flag) {
  return cuda::atomic_ref<uint64_t, cuda::thread_scope_system>(*const_cast<uint64_t*>(flag))
      .load(cuda::memory_order_acquire);
}

__device__ __forceinline__ uint32_t load_relaxed_sys(const uint32_t* p) {
  return cuda::atomic_ref<uint32_t, cuda::thread_scope_system>(*const_cast<uint32_t*>(p))
      .load(cuda::memory_order_relaxed);
}

__device__ __forceinline__ void store_relaxed_sys(uint32_t* p, uint32_t v) {
  cuda::atomic_ref<uint32_t, cuda::thread_scope_system>(*p).store(v, cuda::memory_order_relaxed);
}

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/// Epochs are compared wrap-around safe. A later epoch than wanted satisfies a wait: the one-shot
/// path lets a peer run one launch ahead, and flags of one sender are written in launch order.
__device__ __forceinline__ wait_result judge(uint64_t v, uint32_t epoch, uint32_t sig) {
  const uint32_t e = static_cast<uint32_t>(v >> 32);
  if (static_cast<int32_t>(e - epoch) < 0) return wait_result::pending;
  if (e == epoch && static_cast<uint32_t>(v) != sig) return wait_result::mismatch;
  return wait_result::ok;
}

/// Spin (one thread) until *flag holds epoch `epoch` (or later). Gives up when the flag shows the
/// same epoch with another signature (mismatch), when *abort becomes non-zero (abort), or after
/// limit_ns (timeout): a missing or mismatched peer becomes an error, never a hang.
__device__ __forceinline__ wait_result wait_flag(const uint64_t* flag, uint32_t epoch, uint32_t sig,
                                                 const uint32_t* abort, uint64_t limit_ns) {
  wait_result r = judge(flag_observe(flag), epoch, sig);
  if (r != wait_result::pending) return r;
  const uint64_t start = global_timer_ns();
  for (uint32_t it = 1;; ++it) {
    r = judge(flag_observe(flag), epoch, sig);
    if (r != wait_result::pending) return r;
    if ((it & 255u) == 0) {
      if (load_relaxed_sys(abort) != 0) return wait_result::abort;
      if (global_timer_ns() - start > limit_ns) return wait_result::timeout;
    }
  }
}

#endif

}  // namespace echo::detail
