// Size-based dispatch, per GPU model, P, transport and link: below which size a call is not
// quantized, and from which sizes a cuda_ipc call runs under its policy's mid and wide variants
// (tier.cuh). Below the quantized size a call takes the transport's best unquantized all-reduce:
// for cuda_ipc Echo's own (the one-shot kernel up to 1 MiB, else quant::none through the
// pipeline), for nccl ncclAllReduce itself (exact, not quantized; docs/transports.md).
//
// Every size is a size: `never` (SIZE_MAX) is the one value that says a tier is not taken, and a
// row names every size it sets (dispatch_entry's setters), so no 0 means "inherit".
#pragma once

#include "../config.cuh"
#include "size_band.cuh"

#include <cstdint>
#include <cstring>

namespace echo::tuning {

/// The sizes of one row. The mid tier (quantized calls, where the policy has a mid variant) runs
/// from mid_from to the call's wide size, which depends on its call_weight (pipeline_policy.cuh).
struct dispatch_sizes {
  size_t unquantized_below = 0;      ///< below: not quantized
  size_t wide_from = never;          ///< a quantized call under a policy without a mid variant goes wide
  size_t wide_from_unquantized = never;  ///< an unquantized call through the pipeline goes wide
  size_t mid_from = never;           ///< a quantized call goes mid
  size_t mid_to_heavy = never;       ///< ... and wide from here: codes above 4 bits
  size_t mid_to_lean = never;        ///< 4 bits or fewer without state
  size_t mid_to_stateful = never;    ///< 4 bits or fewer with error-feedback state
  /// A call with an epilogue normalises its rows in the all-reduce's last launch at these sizes,
  /// elsewhere in a launch of its own right after it. Measured on Hopper (docs/benchmarks.md, "The
  /// fused epilogue"): in the launch from 2 MiB, where the rows read back from L2 what the gather
  /// stored; below, the grid barrier before them costs more than the second launch; from 16 MiB
  /// the rows are bound by HBM and a launch of their own has the whole GPU's warps for them.
  size_band epilogue_in_launch{size_t(2) << 20, size_t(16) << 20};
};

/// One row: the GPU (a substring of cudaDeviceProp::name), P, the transport's name, the link
/// ("p2p": every peer in this node with peer access; "net": otherwise) and its sizes, each set by
/// name.
struct dispatch_entry {
  const char* gpu;
  int ranks;
  const char* transport;
  const char* link;
  dispatch_sizes sizes{};

  constexpr dispatch_entry quantized_from(size_t b) const { return with(&dispatch_sizes::unquantized_below, b); }
  constexpr dispatch_entry wide_from(size_t b) const { return with(&dispatch_sizes::wide_from, b); }
  constexpr dispatch_entry wide_from_unquantized(size_t b) const { return with(&dispatch_sizes::wide_from_unquantized, b); }
  constexpr dispatch_entry mid_from(size_t b) const { return with(&dispatch_sizes::mid_from, b); }
  constexpr dispatch_entry mid_to_heavy(size_t b) const { return with(&dispatch_sizes::mid_to_heavy, b); }
  constexpr dispatch_entry mid_to_lean(size_t b) const { return with(&dispatch_sizes::mid_to_lean, b); }
  constexpr dispatch_entry mid_to_stateful(size_t b) const { return with(&dispatch_sizes::mid_to_stateful, b); }
  constexpr dispatch_entry epilogue_in_launch(size_t from, size_t to) const {
    dispatch_entry e = *this;
    e.sizes.epilogue_in_launch = size_band{from, to};
    return e;
  }

 private:
  constexpr dispatch_entry with(size_t dispatch_sizes::*field, size_t b) const {
    dispatch_entry e = *this;
    e.sizes.*field = b;
    return e;
  }
};

inline constexpr size_t mib(size_t m) { return m << 20; }

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
    dispatch_entry{"H200", 2, "cuda_ipc", "p2p"}
        .quantized_from(mib(2))
        .wide_from(mib(128))
        .wide_from_unquantized(mib(64))
        .mid_from(mib(32))
        .mid_to_heavy(mib(256))
        .mid_to_lean(mib(512))
        .mid_to_stateful(never),
    // transport::nccl over NVLink: NCCL's own all-reduce is faster than the staged 4-bit pipeline
    // below 64 MiB; over sockets (the stand-in for a network) the 4-bit path wins from 1 MiB.
    dispatch_entry{"H200", 2, "nccl", "p2p"}.quantized_from(mib(64)),
    dispatch_entry{"H200", 2, "nccl", "net"}.quantized_from(mib(1)),
};

/// The row for this GPU, P, transport and link; an unknown one is always quantized and never
/// leaves the policy's own tier.
inline dispatch_entry lookup_dispatch(const char* gpu_name, int ranks, const char* transport, const char* link) {
  for (const auto& e : dispatch_table)
    if (e.ranks == ranks && std::strstr(gpu_name, e.gpu) && std::strcmp(e.transport, transport) == 0 &&
        std::strcmp(e.link, link) == 0)
      return e;
  return dispatch_entry{"default", ranks, transport, link};
}

}  // namespace echo::tuning
