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
// Data moves through rings of R tile slots per peer (tile t in slot t mod R), whose size the
// workspace fixes; flags are indexed by tile in a fixed region (collective/workspace_layout.cuh),
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

#include "../detail/ceil_div.cuh"
#include "../detail/dependent_launch.cuh"
#include "../detail/partition.cuh"
#include "../detail/sync.cuh"
#include "../error.cuh"
#include "tile_stages.cuh"
#include "workspace_layout.cuh"

#include <type_traits>

namespace echo::collective {

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
  int rank;
  int ranks;
  uint32_t sig;              ///< call signature carried in every flag
  int subtiles;              ///< U: warp sub-tiles a tile (and a flag) covers
  size_t ring;               ///< R: tile slots of a peer's ring
  size_t t_begin, t_end;     ///< tiles of this launch (phase schedule: a round of the rings)
  bool last;                 ///< the call's last launch (it writes the chain's tag)
  workspace_layout layout;
  unsigned char* local;        ///< this rank's workspace
  unsigned char* const* peer;  ///< device array: every rank's workspace, as this device maps it
  uint64_t spin_limit_ns;
  int* status;                 ///< host-mapped; a launch that gives up writes its echo::status there
};

namespace detail {

/// Stop this rank's launch and tell the host (and, for a mismatch or a timeout, the peers: they
/// would otherwise wait for their own spin limits). The first reason recorded wins.
inline __device__ void give_up(echo::detail::wait_result why, uint32_t* sync, unsigned char* const* peer, int ranks,
                               int me, int* host_status) {
  using echo::detail::sync_words;
  using echo::detail::wait_result;
  uint32_t code = why == wait_result::mismatch ? static_cast<uint32_t>(status::mismatch)
                                               : static_cast<uint32_t>(status::timeout);
  if (why == wait_result::abort) {
    code = echo::detail::load_relaxed_sys(sync + sync_words::abort);
  } else {
    const uint32_t prev = atomicCAS_system(sync + sync_words::abort, 0u, code);
    if (prev != 0) {
      code = prev;
    } else {
      for (int j = 0; j < ranks; ++j)
        if (j != me) atomicCAS_system(reinterpret_cast<uint32_t*>(peer[j]) + sync_words::abort, 0u, code);
    }
  }
  *reinterpret_cast<volatile int*>(host_status) = static_cast<int>(code);
  __threadfence_system();
}

/// Lane 0 waits; the warp learns the outcome. The __syncwarp() after it extends lane 0's acquire
/// to the warp before any lane reads the data.
__device__ __forceinline__ echo::detail::wait_result warp_wait(const unsigned char* flag, uint64_t epoch, uint32_t sig,
                                                               const uint32_t* abort, uint64_t limit_ns, int lane) {
  int r = 0;
  if (lane == 0)
    r = static_cast<int>(echo::detail::wait_flag(reinterpret_cast<const uint64_t*>(flag), epoch, sig, abort, limit_ns));
  r = __shfl_sync(0xffffffffu, r, 0);
  __syncwarp();
  return static_cast<echo::detail::wait_result>(r);
}

/// Block-level prologue / epilogue shared by the cuda_ipc kernels: read the epoch (and whether
/// the chain continues); at the end the last block advances the epoch and writes the chain tag.
struct launch_frame {
  uint64_t epoch;
  bool active;    ///< the call continues its chain
  bool poisoned;  ///< an earlier launch gave up: do nothing
};

/// A launch on a rank that an earlier launch (or a peer) aborted does nothing but report why
/// (and leave its chain fresh).
inline __device__ launch_frame begin_launch(uint32_t* sync, unsigned char* state, uint64_t chain_key, int* host_status) {
  __shared__ launch_frame f;
  if (threadIdx.x == 0) {
    f.epoch = *reinterpret_cast<volatile uint64_t*>(sync + echo::detail::sync_words::epoch) + 1;
    const uint32_t abort = echo::detail::load_relaxed_sys(sync + echo::detail::sync_words::abort);
    f.poisoned = abort != 0;
    if (f.poisoned && blockIdx.x == 0) {
      *reinterpret_cast<volatile int*>(host_status) = static_cast<int>(abort);
      __threadfence_system();
    }
    // A call that gave up on some rank may have written part of its chain's state in earlier
    // launches (rounds) or blocks, and its last launch, which would write the tag, does not run:
    // the chain restarts fresh rather than continue half-written (a rebuilt object may reuse it).
    if (f.poisoned && state) reinterpret_cast<volatile comp::state_header*>(state)->tag = 0;
    f.active = state && comp::state_header::continues(
                            reinterpret_cast<const volatile comp::state_header*>(state)->tag, chain_key);
  }
  __syncthreads();
  return f;
}

/// tag: what the chain's header says after this call (ignored without state); a launch that gave
/// up (on any rank's warp) leaves a fresh chain instead, its state being partial.
inline __device__ void end_launch(uint32_t* sync, uint64_t epoch, unsigned char* state, uint64_t tag) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(sync + echo::detail::sync_words::done, 1u) == gridDim.x - 1) {
      sync[echo::detail::sync_words::done] = 0;
      const bool failed = echo::detail::load_relaxed_sys(sync + echo::detail::sync_words::abort) != 0;
      if (state) reinterpret_cast<volatile comp::state_header*>(state)->tag = failed ? 0 : tag;
      *reinterpret_cast<volatile uint64_t*>(sync + echo::detail::sync_words::epoch) = epoch;
    }
  }
}

}  // namespace detail

template <class Cfg>
__global__ void __launch_bounds__(Cfg::threads, Cfg::policy::blocks_per_sm)
    pipeline_kernel(const pipeline_params<typename Cfg::element> p) {
  using T = typename Cfg::element;
  using stages = tile_stages<Cfg>;
  using echo::detail::wait_result;
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
  uint32_t* const sync = reinterpret_cast<uint32_t*>(p.local);
  const uint32_t* const abort = sync + echo::detail::sync_words::abort;
  const auto frame = detail::begin_launch(sync, p.state, p.chain_key, p.status);
  if (frame.poisoned) return;
  const uint64_t epoch = frame.epoch;
  const uint64_t mine = echo::detail::flag_stamp(epoch, p.sig);
  const state_ref st{p.state ? p.state + comp::state_header::bytes : nullptr, p.n, frame.active, p.keep_own};
  const int P = p.ranks, me = p.rank;
  const workspace_layout& L = p.layout;
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
      const int subs = static_cast<int>(min(static_cast<size_t>(U), echo::detail::ceil_div(len - t * tile_elems, sub_elems)));
      unsigned char* const slot = p.peer[j] + L.recv_slot(me, t % static_cast<tile_index>(p.ring), tile_bytes);
      detail::over_subtiles<stages>(p.in, st, b + t * tile_elems + static_cast<size_t>(lane) * V, b + len, subs,
                                    sub_elems, [&](const auto& ops, size_t first, int valid, int u) {
                                      const auto r = stages::push(ops, st, p.store_send_errors, first, valid);
                                      Cfg::codec::store(slot + u * sub_bytes, r, lane, valid);
                                    });
      __syncwarp();
      if (lane == 0) echo::detail::flag_publish(reinterpret_cast<uint64_t*>(p.peer[j] + L.recv_flag(me, t)), epoch, mine);
    }
  };
  // B. reduce tile t of the own segment: wait for the receipts, sum, push the sum's packet into
  // every peer's gather ring; publish.
  auto reduce = [&](tile_index t) {
    const size_t b = part.begin(me), len = part.size(me);
    if (t * tile_elems >= len) return wait_result::ok;
    for (int i = 0; i < P; ++i)
      if (i != me) {
        const wait_result w = detail::warp_wait(p.local + L.recv_flag(i, t), epoch, p.sig, abort, p.spin_limit_ns, lane);
        if (w != wait_result::ok) return w;
      }
    const int subs = static_cast<int>(min(static_cast<size_t>(U), echo::detail::ceil_div(len - t * tile_elems, sub_elems)));
    const size_t slot = t % static_cast<tile_index>(p.ring);
    detail::over_subtiles<stages>(
        p.in, st, b + t * tile_elems + static_cast<size_t>(lane) * V, b + len, subs, sub_elems,
        [&](const auto& ops, size_t first, int valid, int u) {
          const auto r = stages::reduce(ops, st, p.out, first, valid, me, P, lane, [&](int i) {
            return static_cast<const unsigned char*>(p.local + L.recv_slot(i, slot, tile_bytes) + u * sub_bytes);
          });
          for (int d = 1; d < P; ++d)
            Cfg::codec::store(p.peer[(me + d) % P] + L.gather_slot(me, slot, tile_bytes) + u * sub_bytes, r, lane, valid);
        });
    __syncwarp();
    if (lane == 0)
      for (int d = 1; d < P; ++d)
        echo::detail::flag_publish(reinterpret_cast<uint64_t*>(p.peer[(me + d) % P] + L.gather_flag(me, t)), epoch, mine);
    return wait_result::ok;
  };
  // C. gather tile t of every other segment from its owner's packet.
  auto gather = [&](tile_index t) {
    for (int d = 1; d < P; ++d) {
      const int j = (me + d) % P;
      const size_t b = part.begin(j), len = part.size(j);
      if (t * tile_elems >= len) continue;
      const wait_result w = detail::warp_wait(p.local + L.gather_flag(j, t), epoch, p.sig, abort, p.spin_limit_ns, lane);
      if (w != wait_result::ok) return w;
      const unsigned char* const slot = p.local + L.gather_slot(j, t % static_cast<tile_index>(p.ring), tile_bytes);
      for (int u = 0; u < U && t * tile_elems + u * sub_elems < len; ++u) {
        const size_t first = b + t * tile_elems + u * sub_elems + static_cast<size_t>(lane) * V;
        stages::gather(slot + u * sub_bytes, p.out, first, detail::valid_count(first, b + len, V), lane);
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
  if (why != wait_result::ok && lane == 0) detail::give_up(why, sync, p.peer, P, me, p.status);

  // The chain's tag changes with the call's last launch only (every launch of a call reads it).
  detail::end_launch(sync, epoch, p.last ? p.state : nullptr,
                     !p.keep_own ? uint64_t(0)  // a closing call leaves a fresh chain
                     : p.store_send_errors ? p.chain_key
                                           : comp::state_header::after_deferred(p.chain_key, p.element_type, frame.active));
}

#endif

}  // namespace echo::collective
