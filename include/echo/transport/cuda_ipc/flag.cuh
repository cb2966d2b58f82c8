// The flags cuda_ipc ranks synchronise with: words that carry (epoch, call signature).
//
// Memory-ordering contract (PTX memory model, system scope because the peer is another GPU or
// another process):
//  - publish: the lanes of a warp store their data, __syncwarp() makes those stores happen-before
//    lane 0, and lane 0 stores the flag with a release at system scope (cumulative), so a peer
//    that observes the flag with an acquire observes all of the warp's data.
//  - wait: lane 0 polls with an acquire at system scope; the caller's __syncwarp() extends it to
//    the warp before any lane reads the data. Data a peer wrote is read with ld.global.cg.
//
// A flag is two 64-bit words (16 bytes): the epoch of the launch that published it, a 64-bit
// count that never wraps, and a stamp, (the epoch's low 32 bits, the call signature: a hash of n,
// element type and configuration, identical on every rank that makes the same call), stored
// before the epoch word with it released after. Flags live in a region fixed at construction,
// each address with one role for the object's life, so a flag only ever holds a flag of an
// earlier or the current launch (or the next one: a peer runs at most one launch ahead): an
// earlier epoch is never taken for the current one, and the current epoch with another signature
// is a mismatched call (different n, type or configuration on some rank), never data.
//
// Why 64 bits (2026-12-01): flags of one 64-bit word held a 32-bit epoch next to the signature,
// compared wrap-around. A flag that no launch wrote for 2^31 launches (one the small calls of a
// long decode never use; never-written flags hold 0 from construction) then read as a *later*
// epoch, and the first large call after ~2^31 small ones consumed ring slots its peer had not
// written yet and returned success with wrong data (an adversarial review reproduced it by
// starting the epoch at 2^31 - 10: test/collective/faults.cu). A 64-bit count does not wrap in
// any lifetime (at a launch a microsecond, 580,000 years).
#pragma once

#include "../../config.cuh"

#if ECHO_HAS_CUDA
#include <cuda/atomic>
#endif

namespace echo::transport::cuda_ipc {

/// The words at the start of every rank's workspace (u32 indices).
struct sync_words {
  static constexpr int done = 1;   ///< blocks of the current launch that finished
  static constexpr int abort = 2;  ///< non-zero: an echo::status code; set locally or by a peer
  static constexpr int epoch = 4;  ///< u64 (words 4-5): the last launch this rank completed (advanced by its last block)
  static constexpr int arrived = 8;   ///< blocks of the current launch at its grid barrier (peer_channel::grid_sync)
  static constexpr int released = 9;  ///< grid barriers passed (the barrier's generation)
  static constexpr size_t bytes = 256;
};

/// How a wait ended.
enum class wait_result : int { ok, mismatch, abort, timeout };

/// A flag's two words (the epoch word first; 16-byte aligned in the workspace layout).
struct flag_words {
  static constexpr size_t bytes = 16;
};
static_assert(sync_words::bytes % flag_words::bytes == 0, "flags after the sync words stay 16-byte aligned");

/// The stamp that travels beside the epoch: the epoch's low 32 bits and the call signature.
ECHO_HD uint64_t flag_stamp(uint64_t epoch, uint32_t sig) { return (epoch << 32) | sig; }

#if ECHO_HAS_CUDA

/// Publish a flag: the stamp (relaxed), then the epoch with a release at system scope, so a
/// reader that acquires the epoch sees this stamp or a later one.
__device__ __forceinline__ void flag_publish(uint64_t* flag, uint64_t epoch, uint64_t stamp) {
  cuda::atomic_ref<uint64_t, cuda::thread_scope_system>(flag[1]).store(stamp, cuda::memory_order_relaxed);
  cuda::atomic_ref<uint64_t, cuda::thread_scope_system>(flag[0]).store(epoch, cuda::memory_order_release);
}

__device__ __forceinline__ uint32_t load_relaxed_sys(const uint32_t* p) {
  return cuda::atomic_ref<uint32_t, cuda::thread_scope_system>(*const_cast<uint32_t*>(p))
      .load(cuda::memory_order_relaxed);
}

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/// Both words of a flag in one 16-byte load with acquire semantics (one load a poll, as with the
/// 8-byte flags before: a second, dependent load of the stamp cost 4 % at 4 MiB on one GPU). A
/// vector access is element accesses in no set order, so the stamp it returns can be older than
/// the epoch beside it; a re-read after the acquire cannot be (the stamp is stored before the
/// epoch is released).
__device__ __forceinline__ void flag_observe(const uint64_t* flag, uint64_t& e, uint64_t& stamp) {
  // .global takes a global address: convert the generic pointer rather than rely on the two
  // coinciding (they do on every shipped GPU, but the PTX spec does not promise it).
  asm volatile("ld.acquire.sys.global.v2.u64 {%0, %1}, [%2];"
               : "=l"(e), "=l"(stamp)
               : "l"(static_cast<uint64_t>(__cvta_generic_to_global(flag)))
               : "memory");
}

/// After the epoch word showed e >= epoch (acquired): the current epoch with another signature is
/// a mismatch. A later epoch satisfies the wait: the one-shot path lets a peer run one launch
/// ahead, and flags of one sender are written in launch order; its stamp may then be of the
/// launch after the one it acquired, so only a stamp of this epoch is compared.
__device__ __forceinline__ wait_result judge_stamp(uint64_t stamp, uint64_t epoch, uint32_t sig) {
  return static_cast<uint32_t>(stamp >> 32) == static_cast<uint32_t>(epoch) && static_cast<uint32_t>(stamp) != sig
             ? wait_result::mismatch
             : wait_result::ok;
}
__device__ __forceinline__ wait_result judge_reached(const uint64_t* flag, uint64_t e, uint64_t stamp, uint64_t epoch,
                                                     uint32_t sig) {
  if (e != epoch || stamp == flag_stamp(epoch, sig)) return wait_result::ok;
  // Anything else may be torn (an older stamp, even one exactly 2^32 launches old whose high half
  // matches) or already the next launch's: re-read it, now ordered after the acquired epoch.
  stamp = cuda::atomic_ref<uint64_t, cuda::thread_scope_system>(*const_cast<uint64_t*>(flag + 1))
              .load(cuda::memory_order_relaxed);
  return judge_stamp(stamp, epoch, sig);
}

/// Spin (one thread) until the flag holds epoch `epoch` (or later). Gives up when the flag shows
/// the same epoch with another signature (mismatch), when *abort becomes non-zero (abort), or
/// after limit_ns (timeout): a missing or mismatched peer becomes an error, never a hang.
__device__ __forceinline__ wait_result wait_flag(const uint64_t* flag, uint64_t epoch, uint32_t sig,
                                                 const uint32_t* abort, uint64_t limit_ns) {
  uint64_t e, stamp;
  flag_observe(flag, e, stamp);
  if (e >= epoch) return judge_reached(flag, e, stamp, epoch, sig);
  const uint64_t start = global_timer_ns();
  for (uint32_t it = 1;; ++it) {
    flag_observe(flag, e, stamp);
    if (e >= epoch) return judge_reached(flag, e, stamp, epoch, sig);
    if ((it & 255u) == 0) {
      if (load_relaxed_sys(abort) != 0) return wait_result::abort;
      if (global_timer_ns() - start > limit_ns) return wait_result::timeout;
    }
  }
}

#endif

}  // namespace echo::transport::cuda_ipc
