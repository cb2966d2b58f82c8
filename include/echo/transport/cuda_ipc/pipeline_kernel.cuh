// The cuda_ipc pipeline: one persistent launch per call, for any n.
//
// A segment (the part of the message one rank owns) is cut into tiles of U warp sub-tiles; a
// flag covers a tile. Warp w of the grid (W warps) handles tiles t = w, w + W, w + 2W, ... and
// runs the three stages of different tiles in one loop, so that a warp's stages overlap with its
// peers' and the link never waits for a whole stage to drain:
//   iteration m:  A. push    tile t_m       to every peer (x' = x + c, quantize, store, publish)
//                 B. reduce  tile t_(m-L)   of the own segment (wait for the P-1 receipts, sum in
//                                           rank order, quantize once, push to every peer, publish)
//                 C. gather  tile t_(m-2L)  of every other segment (wait, dequantize, write out)
// (L = Policy::stage_lag, 1 by default.)
// The sequence-parallel halves (collective/operation.cuh) run the same stages and flags, some of
// them without data, so that the flow control below holds for them unchanged: the
// reduce-scatter's B writes the owner's sum S to its output and publishes no packet, and its C
// only waits (the owner has read its receipts of the tile); the all-gather's A only publishes
// (the rank has gathered the ring slots the owner will write), and its B quantizes the owner's
// own segment alone.
// Data moves through rings of R tile slots per peer (tile t in slot t mod R), whose size the
// workspace fixes; flags are indexed by tile in a fixed region (workspace_layout.cuh),
// so a flag never changes role. Flow control needs no extra flag: when the message has more tiles
// than the ring, R is a multiple of W and at least (2L + 1) W, so tile t - R is the same warp's
// tile 2L + 1 or more iterations back, and that warp gathered it (C of iteration m-1 at the
// latest) before it pushes tile t. Gathering t - R from owner j means j reduced t - R, i.e. read its recv slot, and
// j reduces t only after this rank pushed t, i.e. after this rank read its gather slot of t - R:
// both rings are free when reused. Across launches the same holds: a rank starts a call only after
// gathering all of the last one.
// Progress: a warp waits only for work of peers' warps on an earlier stage of the same or an
// earlier tile, and every warp of the grid is resident (the grid never exceeds what fits at
// once), so by induction on (tile, stage) every wait ends; a peer that never arrives ends it
// through the spin limit, a mismatched call through the signature carried in every flag.
#pragma once

#include "../../collective/operation.cuh"
#include "../../collective/tile_stages.cuh"
#include "../../detail/ceil_div.cuh"
#include "../../detail/dependent_launch.cuh"
#include "../../detail/partition.cuh"
#include "../../epilogue/rows.cuh"
#include "peer_channel.cuh"
#include "workspace_layout.cuh"

#include <type_traits>

namespace echo::transport::cuda_ipc {

#if ECHO_HAS_CUDA

/// Plain-data arguments of one launch of the pipeline.
template <class T>
struct pipeline_params {
  const T* in;
  T* out;
  unsigned char* state;      ///< the chain's state memory (header first), or null
  bool store_send_errors;    ///< false (deferred): the send errors are left to update_kernel
  bool keep_own;             ///< false: the call closes its chain (keeps no error, leaves it fresh)
  size_t n;
  uint64_t chain_key;        ///< comp::state_header::key of the call (n and the domain of its errors)
  unsigned element_type;     ///< echo::dtype of the call
  size_t granule;            ///< partition granule (quantization group; 256 for quant::none)
  uint32_t sig;              ///< call signature carried in every flag
  int subtiles;              ///< U: warp sub-tiles a tile (and a flag) covers
  size_t ring;               ///< R: tile slots of a peer's ring
  size_t t_begin, t_end;     ///< tiles of this launch (phase schedule: a round of the rings)
  bool last;                 ///< the call's last launch (it writes the chain's tag)
  epilogue::job<T> epilogue; ///< active: the stores add into its residual (epilogue/destination.cuh)
  bool rows_in_kernel;       ///< the last launch normalises the rows (else a launch of their own does)
  workspace_layout layout;
  peer_channel channel;
};

/// Op: what the call computes (collective/operation.cuh). reduce_scatter: out holds the own
/// segment alone; all_gather: in does.
template <class Cfg, collective::operation Op = collective::operation::all_reduce>
__global__ void __launch_bounds__(Cfg::threads, Cfg::policy::blocks_per_sm)
    pipeline_kernel(const pipeline_params<typename Cfg::element> p) {
  using T = typename Cfg::element;
  using stages = collective::tile_stages<Cfg>;
  using collective::state_ref;
  using collective::detail::over_subtiles;
  using collective::detail::valid_count;
  constexpr int V = Cfg::V;
  constexpr size_t sub_elems = Cfg::sub_elems, sub_bytes = Cfg::sub_bytes;
  const int U = p.subtiles;
  const size_t tile_elems = sub_elems * U, tile_bytes = sub_bytes * U;
  const int lane = threadIdx.x & 31;
  // Tile indices: 32-bit in the phase schedule (2^32 tiles of at least 256 values are beyond any
  // memory), which with the partition's quotients took the lean mid kernel's spills away and the
  // 16 MiB calls 2-3 % faster on one GPU; 64-bit in the overlapped one, where 32-bit ones made
  // ptxas spill the lean wide kernel (20 / 24 B) and 4-bit at 1 GiB 1.5 % slower
  // (docs/benchmarks.md).
  using tile_index = std::conditional_t<(Cfg::policy::stage_lag > 0), size_t, uint32_t>;
  const tile_index warp = static_cast<tile_index>(blockIdx.x) * Cfg::warps + threadIdx.x / 32;
  const tile_index W = static_cast<tile_index>(gridDim.x) * Cfg::warps;
  const tile_index lag = static_cast<tile_index>(Cfg::policy::stage_lag) * W;  // push -> reduce -> gather distance
  echo::detail::wait_prior_grid();  // launched by detail::launch_dependent
  const peer_channel channel = p.channel;  // by value: no address of a kernel parameter is taken
  const auto frame = channel.open(p.state, p.chain_key);
  if (frame.poisoned) return;
  const launch_channel ch(channel, frame.epoch, p.sig);
  const state_ref st{p.state ? p.state + comp::state_header::bytes : nullptr, p.n, frame.active, p.keep_own};
  const int P = channel.ranks, me = channel.rank;
  unsigned char* const local = channel.local;
  unsigned char* const* const peer = channel.peer;
  const workspace_layout& L = p.layout;
  const epilogue::destination<T> to{p.out, p.epilogue.active() ? p.epilogue.residual : nullptr};
  constexpr bool scatters = Op == collective::operation::reduce_scatter;
  constexpr bool gathers_only = Op == collective::operation::all_gather;
  using rank_place = typename stages::rank_place;
  const echo::detail::partition_quotients part{p.n, p.granule, P};
  const tile_index tiles0 = static_cast<tile_index>(echo::detail::ceil_div(part.size(0), tile_elems));  // segment 0 is the longest
  wait_result why = wait_result::ok;
  (void)lag;
  (void)tiles0;

  // A. push tile t of every peer's segment into the peer's recv ring; publish.
  auto push = [&](tile_index t) {
    for (int d = 1; d < P; ++d) {
      const int j = (me + d) % P;
      const size_t b = part.begin(j), len = part.size(j);
      if (t * tile_elems >= len) continue;
      if constexpr (gathers_only) {  // no data: this rank's gather slots of tile t are free for j
        __syncwarp();  // every lane's reads of the slot's last tile come before the release
        if (lane == 0) ch.signal(j, L.recv_flag(me, t));
        continue;
      }
      const int subs = static_cast<int>(min(static_cast<size_t>(U), echo::detail::ceil_div(len - t * tile_elems, sub_elems)));
      unsigned char* const slot = peer[j] + L.recv_slot(me, t % static_cast<tile_index>(p.ring), tile_bytes);
      over_subtiles<stages>(p.in, st, b + t * tile_elems + static_cast<size_t>(lane) * V, b + len, subs,
                                    sub_elems, [&](const auto& ops, size_t first, int valid, int u) {
                                      const auto r = stages::push(ops, st, p.store_send_errors, first, valid);
                                      Cfg::codec::store(slot + u * sub_bytes, r, lane, valid);
                                    });
      __syncwarp();
      if (lane == 0) ch.signal(j, L.recv_flag(me, t));
    }
  };
  // B. reduce tile t of the own segment: wait for the receipts, sum, push the sum's packet into
  // every peer's gather ring; publish.
  auto reduce = [&](tile_index t) {
    const size_t b = part.begin(me), len = part.size(me);
    if (t * tile_elems >= len) return wait_result::ok;
    for (int i = 0; i < P; ++i)
      if (i != me) {
        const wait_result w = ch.warp_wait(L.recv_flag(i, t), lane);
        if (w != wait_result::ok) return w;
      }
    const int subs = static_cast<int>(min(static_cast<size_t>(U), echo::detail::ceil_div(len - t * tile_elems, sub_elems)));
    const size_t slot = t % static_cast<tile_index>(p.ring);
    const size_t first0 = b + t * tile_elems + static_cast<size_t>(lane) * V;
    auto receipt = [&](int u) {
      return [&, u](int i) {
        return static_cast<const unsigned char*>(local + L.recv_slot(i, slot, tile_bytes) + u * sub_bytes);
      };
    };
    if constexpr (scatters) {
      over_subtiles<stages>(p.in, st, first0, b + len, subs, sub_elems, [&](const auto& ops, size_t first, int valid, int u) {
        stages::reduce_scatter(ops, st, p.out + (first - b), first, valid, {me, P}, receipt(u));
      });
    } else {
      // The all-gather's owner quantizes its own segment alone (no receipts, no chain; in[0] is
      // value b); the all-reduce's sums it with the receipts.
      const state_ref own = gathers_only ? state_ref{nullptr, p.n, false, false} : st;
      const rank_place at = gathers_only ? rank_place{0, 1} : rank_place{me, P};
      over_subtiles<stages>(
          p.in, own, first0, b + len, subs, sub_elems,
          [&](const auto& ops, size_t first, int valid, int u) {
            const auto r = stages::reduce(ops, own, to, first, valid, at, receipt(u));
            for (int d = 1; d < P; ++d)
              Cfg::codec::store(peer[(me + d) % P] + L.gather_slot(me, slot, tile_bytes) + u * sub_bytes, r, lane, valid);
          },
          gathers_only ? b : 0);
    }
    __syncwarp();
    if (lane == 0)
      for (int d = 1; d < P; ++d) ch.signal((me + d) % P, L.gather_flag(me, t));
    return wait_result::ok;
  };
  // C. gather tile t of every other segment from its owner's packet.
  auto gather = [&](tile_index t) {
    for (int d = 1; d < P; ++d) {
      const int j = (me + d) % P;
      const size_t b = part.begin(j), len = part.size(j);
      if (t * tile_elems >= len) continue;
      const wait_result w = ch.warp_wait(L.gather_flag(j, t), lane);
      if (w != wait_result::ok) return w;
      if constexpr (scatters) continue;  // no data: j has read its receipts of tile t
      const unsigned char* const slot = local + L.gather_slot(j, t % static_cast<tile_index>(p.ring), tile_bytes);
      for (int u = 0; u < U && t * tile_elems + u * sub_elems < len; ++u) {
        const size_t first = b + t * tile_elems + u * sub_elems + static_cast<size_t>(lane) * V;
        stages::gather(slot + u * sub_bytes, to, first, valid_count(first, b + len, V), lane);
      }
    }
    return wait_result::ok;
  };

  if constexpr (Cfg::policy::stage_lag > 0) {
    // Stages of different tiles in one loop (see the top of the file); tiles [0, tiles0).
    for (tile_index t = warp;; t += W) {
      if (t < tiles0) push(t);
      if (t >= lag && t - lag < tiles0) {
        why = reduce(t - lag);
        if (why != wait_result::ok) break;
      }
      if (t >= 2 * lag) {
        if (t - 2 * lag >= tiles0) break;
        why = gather(t - 2 * lag);
        if (why != wait_result::ok) break;
      }
    }
  } else {
    // One stage after another over this launch's tiles [t_begin, t_end) (a round of the rings).
    const tile_index t0 = static_cast<tile_index>(p.t_begin) + warp, t1 = static_cast<tile_index>(p.t_end);
    for (tile_index t = t0; t < t1; t += W) push(t);
    for (tile_index t = t0; t < t1 && why == wait_result::ok; t += W) why = reduce(t);
    for (tile_index t = t0; t < t1 && why == wait_result::ok; t += W) why = gather(t);
  }
  if (why != wait_result::ok && lane == 0) ch.give_up(why);
  // Rows cross tiles and segments: the rows start once every block has added its part into the
  // residual. One chunk in flight a lane: more raised this kernel's registers and spills, which
  // calls without an epilogue pay too (epilogue/rows.cuh, chunks_in_flight).
  if (Op == collective::operation::all_reduce && p.last && p.epilogue.active() && p.rows_in_kernel && channel.grid_sync())
    epilogue::apply_rows<T, 1, epilogue::sum_at::residual>(p.epilogue, p.out, p.n);

  // The chain's tag changes with the call's last launch only (every launch of a call reads it).
  channel.close(frame.epoch, p.last ? p.state : nullptr,
                     !p.keep_own ? uint64_t(0)  // a closing call leaves a fresh chain
                     : p.store_send_errors ? p.chain_key
                                           : comp::state_header::after_deferred(p.chain_key, p.element_type, frame.active));
}

#endif

}  // namespace echo::transport::cuda_ipc
