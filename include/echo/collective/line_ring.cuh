// Packets in 128-byte lines that carry their own readiness (NCCL's LL128 idea), for rings whose
// consumer reads a packet microseconds after it lands, so that its bytes stay in L2.
//
// A line is 15 u64 words of payload and one u64 flag in its last 8 bytes. A warp writes (and
// reads) a line with one 16-byte access in each of 8 consecutive lanes, lane 7 of the 8 holding
// the flag, and relies, as NCCL's LL128 protocol does, on a line written by one store instruction
// of a warp arriving whole and being read whole by one load instruction: a reader that sees the
// flag sees the line's payload, with no fence and no separate flag word. That is a property of the
// NVLink and L2 of the GPUs NCCL enables LL128 on (sm_70 to sm_90 over NVLink), not of the PTX
// memory model; docs/benchmarks.md says where it was tested.
//
// The flag carries (epoch, signature, step): a slot's earlier content (an earlier step of this
// launch, an earlier launch) never equals it, and a peer running another call shows its own
// signature.
#pragma once

#include "../detail/sync.cuh"

#include <cstddef>
#include <cstdint>

namespace echo::collective {

struct line_format {
  static constexpr int bytes = 128;
  static constexpr int payload_words = 15;  ///< u64 words of payload a line (word 15: the flag)
  /// Lines of a packet of `payload` bytes.
  ECHO_HD static constexpr int lines(size_t payload) { return static_cast<int>((payload + 119) / 120); }
};

#if ECHO_HAS_CUDA

namespace detail {

constexpr uint32_t line_step_mul = 0x9E3779B1u;  // odd: step -> flag word is one-to-one

__device__ __forceinline__ uint64_t line_flag(uint32_t epoch, uint32_t sig, uint32_t step) {
  return (static_cast<uint64_t>(epoch) << 32) | (sig + step * line_step_mul);
}

/// Words of a warp's staging buffer in shared memory: a packet of LINES lines, padded to 16 bytes.
template <int LINES>
constexpr int staging_words = (15 * LINES + 2) & ~1;

/// Write the packet staged in shared memory (stg: staging_words<LINES>) as LINES lines at dst.
template <int LINES>
__device__ __forceinline__ void put_lines(unsigned char* dst, const uint64_t* stg, uint64_t flag, int lane) {
  const int pos = 2 * (lane & 7);
#pragma unroll
  for (int k0 = 0; k0 < LINES; k0 += 4) {
    const int k = k0 + (lane >> 3);
    if (k < LINES) {
      const uint64_t a = stg[15 * k + pos];
      const uint64_t b = pos == 14 ? flag : stg[15 * k + pos + 1];
      asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(dst + k * 128 + pos * 8), "l"(a), "l"(b)
                   : "memory");
    }
  }
}

/// Whether a flag that is not the awaited one shows a mismatched call: the same epoch with a
/// signature or a step that no earlier step of this call writes.
__device__ __forceinline__ bool line_mismatch(uint64_t seen, uint32_t epoch, uint32_t sig, uint32_t step) {
  const uint32_t e = static_cast<uint32_t>(seen >> 32);
  if (static_cast<int32_t>(e - epoch) > 0) return true;  // a later launch: never, in a matched run
  if (e != epoch) return false;                           // an earlier launch's content: pending
  // inverse of line_step_mul modulo 2^32 (Newton's iteration), so the earlier step is recovered
  uint32_t inv = line_step_mul;
#pragma unroll
  for (int i = 0; i < 4; ++i) inv *= 2u - line_step_mul * inv;
  const uint32_t was = (static_cast<uint32_t>(seen) - sig) * inv;
  return was >= step;
}

/// Read the LINES lines at src into shared memory (stg) once every line shows `flag`; gives up
/// on a mismatched flag, an abort or the spin limit (every lane returns the same). `drop`:
/// discard each line from L2 once read, so it is never written back to memory. Copy false: only
/// wait (the flag lanes read the flags alone; stg and drop unused).
template <int LINES, bool Copy = true>
__device__ __forceinline__ echo::detail::wait_result get_lines(uint64_t* stg, const unsigned char* src, uint32_t epoch,
                                                               uint32_t sig, uint32_t step, const uint32_t* abort,
                                                               uint64_t limit_ns, int lane, bool drop) {
  using echo::detail::wait_result;
  constexpr int ROUNDS = (LINES + 3) / 4;
  const uint64_t flag = line_flag(epoch, sig, step);
  const int pos = 2 * (lane & 7);
  uint64_t a[ROUNDS], b[ROUNDS];
  uint64_t start = 0;
  for (uint32_t it = 0;; ++it) {
    bool ready = true, bad = false;
#pragma unroll
    for (int r = 0; r < ROUNDS; ++r) {
      const int k = 4 * r + (lane >> 3);
      if (k < LINES && (Copy || pos == 14)) {
        if (Copy) {
          asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];"
                       : "=l"(a[r]), "=l"(b[r])
                       : "l"(src + k * 128 + pos * 8)
                       : "memory");
        } else {
          asm volatile("ld.volatile.global.u64 %0, [%1];" : "=l"(b[r]) : "l"(src + k * 128 + 120) : "memory");
        }
        if (pos == 14 && b[r] != flag) {
          ready = false;
          bad |= line_mismatch(b[r], epoch, sig, step);
        }
      }
    }
    if (__all_sync(0xffffffffu, ready)) break;
    if (__any_sync(0xffffffffu, bad)) return wait_result::mismatch;
    if ((it & 255u) == 0) {
      int give_up = 0;
      if (lane == 0) {
        const uint64_t now = echo::detail::global_timer_ns();
        if (it == 0) start = now;
        if (echo::detail::load_relaxed_sys(abort) != 0) give_up = 1;
        else if (now - start > limit_ns) give_up = 2;
      }
      give_up = __shfl_sync(0xffffffffu, give_up, 0);
      if (give_up) return give_up == 1 ? wait_result::abort : wait_result::timeout;
    }
  }
  if constexpr (Copy) {
#pragma unroll
    for (int r = 0; r < ROUNDS; ++r) {
      const int k = 4 * r + (lane >> 3);
      if (k < LINES) {
        stg[15 * k + pos] = a[r];
        if (pos != 14) stg[15 * k + pos + 1] = b[r];
        if (drop && pos == 0)
          asm volatile("discard.global.L2 [%0], 128;" ::"l"(__cvta_generic_to_global(src + k * 128)) : "memory");
      }
    }
  }
  return wait_result::ok;
}

}  // namespace detail

#endif

}  // namespace echo::collective
