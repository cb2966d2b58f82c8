// Device-side synchronisation primitives for peer-to-peer flags.
//
// Memory-ordering contract (PTX memory model, system scope because the peer is another GPU):
//  - publish(): the caller has made the block's data stores happen-before thread 0 with
//    __syncthreads(); thread 0 then stores the flag with st.release.sys, which is cumulative, so
//    a peer that observes the flag with an acquire also observes all of the block's data.
//  - wait(): thread 0 polls with ld.acquire.sys; the caller's following __syncthreads() extends
//    that acquire to every thread of the block before they read the data.
//  - Data in the workspace is read with ld.global.cg (L2, never a stale L1 line).
#pragma once

#include "../config.cuh"

namespace echo::detail {

#if ECHO_HAS_CUDA

__device__ __forceinline__ void store_release_sys(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t load_acquire_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ uint32_t load_relaxed_sys(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/// Flags carry launch epochs; a peer may already have published a later epoch (the one-shot
/// path lets a rank run one launch ahead), so a wait is satisfied by want or anything after it
/// (wrap-around safe).
__device__ __forceinline__ bool epoch_reached(uint32_t flag, uint32_t want) {
  return static_cast<int32_t>(flag - want) >= 0;
}

/// Spin (one thread) until *flag has reached epoch `want`. Gives up, returning false, when
/// `abort` becomes non-zero or `limit_ns` have passed: a missing peer becomes an error, never a
/// hang.
__device__ __forceinline__ bool wait_flag(const uint32_t* flag, uint32_t want, const uint32_t* abort,
                                          uint64_t limit_ns) {
  if (epoch_reached(load_acquire_sys(flag), want)) return true;
  const uint64_t start = global_timer_ns();
  for (uint32_t it = 1;; ++it) {
    if (epoch_reached(load_acquire_sys(flag), want)) return true;
    if ((it & 255u) == 0) {
      if (load_relaxed_sys(abort) != 0) return false;
      if (global_timer_ns() - start > limit_ns) return false;
    }
  }
}

#endif

}  // namespace echo::detail
