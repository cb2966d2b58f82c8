// Size-based dispatch: below which size a call is not quantized, per GPU model, P, transport and
// link. Below it a call takes the transport's best unquantized all-reduce: for cuda_ipc Echo's own
// (the one-shot kernel up to 1 MiB, else quant::none through the pipeline),
// for nccl ncclAllReduce itself (exact, not quantized; docs/transports.md).
#pragma once

#include "config.cuh"

#include <cstdint>
#include <cstring>

namespace echo {

struct dispatch_entry {
  const char* gpu;        ///< substring of cudaDeviceProp::name
  int ranks;
  const char* transport;  ///< Transport::name
  const char* link;       ///< "p2p": every peer in this node with peer access; "net": otherwise
  size_t unquantized_below;
  /// cuda_ipc: from this size on a quantized call runs under the policy's wide variant, where the
  /// policy has no mid variant for it (0: never).
  size_t wide_from = 0;
  /// The same for an unquantized call through the pipeline (quant::none).
  size_t wide_from_unquantized = 0;
  /// cuda_ipc, where the policy has a mid variant: a quantized call runs under it from mid_from
  /// (0: never), and under the wide variant from the size of its collective::call_weight:
  /// mid_to_heavy (codes above 4 bits; 0: wide_from), mid_to_lean (4 bits or fewer without state;
  /// 0: mid_to_heavy), mid_to_stateful (4 bits or fewer with error-feedback state; 0: mid_to_heavy;
  /// SIZE_MAX: never).
  size_t mid_from = 0;
  size_t mid_to_heavy = 0;
  size_t mid_to_lean = 0;
  size_t mid_to_stateful = 0;
};

/// Measured with benchmark/echo_bench (docs/benchmarks.md has the run behind each row).
inline constexpr dispatch_entry dispatch_table[] = {
    // 2 x H200 NV18: the 16-bit one-shot / pipeline beats the 4-bit path below 2 MiB. The wide
    // policies (stages overlapped; heavy, lean or plain by the call) beat the narrow one from
    // 256 MiB and lose at 64 MiB; for the 16-bit pipeline the plain one (8 warps a SM) wins at
    // 64 MiB and loses at 16 MiB. The mid policies (32 values a lane, larger flags) beat the
    // narrow one from 32 MiB and lose at 16 MiB (4-bit: 31.9 against 31.0 us); the wide ones beat
    // them from 256 MiB for 8-bit (heavy) and from 512 MiB for 4-bit (lean) (2026-11-30,
    // docs/benchmarks.md); for 4-bit + error feedback (stateful) never up to 1 GiB (256 MiB: 352
    // against 387 us; 1 GiB: 1408 against 1480 us).
    {"H200", 2, "cuda_ipc", "p2p", size_t(2) << 20, size_t(128) << 20, size_t(64) << 20, size_t(32) << 20,
     size_t(256) << 20, size_t(512) << 20, SIZE_MAX},
    // transport::nccl over NVLink: NCCL's own all-reduce is faster than the staged 4-bit pipeline
    // below 64 MiB; over sockets (the stand-in for a network) the 4-bit path wins from 1 MiB.
    {"H200", 2, "nccl", "p2p", size_t(64) << 20},
    {"H200", 2, "nccl", "net", size_t(1) << 20},
};

/// The entry for this GPU, P, transport and link; unknown ones get 0: always quantized.
inline dispatch_entry lookup_dispatch(const char* gpu_name, int ranks, const char* transport, const char* link) {
  for (const auto& e : dispatch_table)
    if (e.ranks == ranks && std::strstr(gpu_name, e.gpu) && std::strcmp(e.transport, transport) == 0 &&
        std::strcmp(e.link, link) == 0)
      return e;
  return {"default", ranks, transport, link, 0, 0, 0, 0, 0, 0, 0};
}

}  // namespace echo
