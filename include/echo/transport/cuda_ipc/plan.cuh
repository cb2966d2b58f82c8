// How the cuda_ipc pipeline cuts one call: sub-tiles a flag (U), tiles, warps and ring slots. A pure
// function of numbers every rank holds alike (n, constants, the resident grid of one GPU model), so
// ranks plan alike, and testable on the host (test/transport/cuda_ipc/plan.cpp checks the flow-control rule
// on random inputs). The launch signature carries (U, ring), so ranks that still planned
// differently report a mismatch instead of mixing layouts.
#pragma once

#include "../../detail/ceil_div.cuh"

#include <algorithm>
#include <cstddef>

namespace echo::transport::cuda_ipc {

/// What a plan depends on (one call under one policy).
struct plan_inputs {
  size_t subs0 = 0;        ///< sub-tiles of the largest segment (segment 0)
  size_t resident = 0;     ///< warps of the grid the GPU holds at once (blocks x warps a block)
  size_t block_warps = 1;  ///< warps a block
  size_t u_max = 1;        ///< sub-tiles a flag at most (the policy's flag_elems), at least 1
  size_t flag_tiles = 1;   ///< flags a segment may use (workspace_layout::flag_tiles)
  size_t ring_bytes = 0;   ///< one peer's ring
  size_t sub_bytes = 1;    ///< one sub-tile in the ring
  size_t stage_lag = 0;    ///< pipeline_policy::stage_lag (0: the phase schedule)
  size_t spread_warps = 2048;  ///< phase schedule: one sub-tile a flag below this many sub-tiles
};

/// How a call is cut; why is set when it cannot be (U and tiles0 then say what was tried).
struct plan {
  size_t U = 1, tiles0 = 0, warps = 0, ring = 0;
  int grid = 0;
  const char* why = nullptr;
};

/// A flag covers U sub-tiles: one while warps would otherwise go idle (spread small messages
/// wide), more for large ones (amortise the flag's system-scope fence), and enough that the tiles
/// fit the flag region. The phase schedule runs up to `ring` tiles a round on up to that many
/// warps. The overlapped schedule (stage_lag L >= 1) reuses slots within a call only when
/// R >= (2 L + 1) W, R a multiple of the grid's warps W (the flow-control rule).
inline plan make_plan(const plan_inputs& in) {
  using echo::detail::ceil_div;
  plan r;
  const bool overlap = in.stage_lag > 0;
  const size_t per_warp = 2 * in.stage_lag + 1;
  size_t U = overlap ? std::min(in.u_max, std::max<size_t>(1, in.subs0 / (4 * in.resident)))
                     : std::min(in.u_max, std::max<size_t>(1, in.subs0 / in.spread_warps));
  const size_t u_min = ceil_div(in.subs0, in.flag_tiles);
  U = std::max(U, u_min);
  if (overlap) {
    // Where the ring holds (2 L + 1) tiles for the whole resident grid only with smaller tiles,
    // cover fewer sub-tiles a flag rather than leave warps out (8-bit at 1 GiB, heavy policy:
    // 1.79x -> 1.86x NCCL; docs/tuning.md).
    const size_t fits = in.ring_bytes / (per_warp * in.resident * in.sub_bytes);
    const bool reused = ceil_div(in.subs0, U) > in.ring_bytes / (U * in.sub_bytes);
    if (reused && fits >= 1 && fits < U) U = std::max(fits, u_min);
  }
  const size_t tiles0 = ceil_div(in.subs0, U);
  const size_t slots = in.ring_bytes / (U * in.sub_bytes);
  r.U = U;
  r.tiles0 = tiles0;
  // pipeline_kernel counts tiles and ring slots in 32 bits (its phase schedule): refuse a plan that
  // could overflow them (2^32 tiles a segment: inputs of 1 TiB and more).
  if (tiles0 + in.resident >= (size_t(1) << 32) || slots >= (size_t(1) << 32)) {
    r.why = "the message has too many tiles for the kernel's 32-bit tile index";
    return r;
  }
  if (slots == 0) {
    r.why = "the workspace ring holds no tile: raise workspace_bytes";
    return r;
  }
  size_t warps = 0, ring = slots;
  if (!overlap) {
    warps = std::min(in.resident, std::min(tiles0, slots));  // a round: up to `slots` tiles
  } else if (tiles0 <= slots) {
    warps = std::min(in.resident, tiles0);  // no slot is reused within the call
  } else {
    warps = std::min(in.resident, slots / per_warp / in.block_warps * in.block_warps);
    if (warps == 0) {
      r.why = "the workspace ring holds too few tiles a warp: raise workspace_bytes";
      return r;
    }
    ring = slots / warps * warps;
  }
  r.warps = warps;
  r.ring = ring;
  r.grid = static_cast<int>(ceil_div(warps, in.block_warps));
  return r;
}

}  // namespace echo::transport::cuda_ipc
