// The Echo pipeline as one persistent kernel per round: push (entry), reduce, gather.
//
// Every warp is an independent agent working on warp tiles (32 lanes x V values). Warp w of
// every rank takes work items w, w + warps, ... of each stage in turn:
//   A. push:   for each peer j and tile t of j's segment: x' = x + c, quantize, store the packet
//              into j's recv slot for this rank, publish recv_flag; (fused) store the send error.
//   B. reduce: for each tile t of this rank's segment: wait for all P-1 recv flags, sum in rank
//              order 0..P-1 in fp32 (own term exact), quantize the sum once, push the packet into
//              every peer's gather slot, publish; write the own output and the own error.
//   C. gather: for each peer j and tile t of j's segment: wait for j's gather flag, dequantize,
//              write the output.
// Warps, not blocks, synchronise: a warp's system-scope fence before its flag stalls only that
// warp, so the latency of publishing over NVLink hides behind the other warps' work.
// A warp only ever waits for work of peer warps that has no dependency of its own (A before B,
// B before C in every warp), so a grid no larger than what is co-resident cannot deadlock.
// Slot reuse across launches is safe without extra flags: a rank leaves a launch only after all
// its gathers arrived, which every owner sends only after reading its recv slots.
#pragma once

#include "../comp/error_feedback.cuh"
#include "../detail/partition.cuh"
#include "../detail/sync.cuh"
#include "../error.cuh"
#include "kernel_params.cuh"
#include "tile_codec.cuh"

namespace echo::collective {

#if ECHO_HAS_CUDA

/// Lanes that share one tile (and one flag): a warp.
constexpr int tile_threads = 32;

namespace detail {

/// [begin, begin + len) of segment j handled in this round.
template <class T, class S>
__device__ __forceinline__ void round_range(const kernel_params<T, S>& p, const echo::detail::partition& part, int j,
                                            size_t& begin, size_t& len) {
  const size_t sb = part.begin(j), se = part.end(j), b = sb + p.round_offset;
  begin = b < se ? b : se;
  len = b < se ? (se - b < p.round_len ? se - b : p.round_len) : 0;
}

__device__ __forceinline__ int valid_count(size_t first, size_t end, int V) {
  return first >= end ? 0 : (end - first < static_cast<size_t>(V) ? static_cast<int>(end - first) : V);
}

__device__ __noinline__ void give_up(uint32_t* sync, int* host_status) {
  atomicExch(sync + 2, 1u);  // stop this rank's other warps
  *reinterpret_cast<volatile int*>(host_status) = static_cast<int>(status::timeout);
  __threadfence_system();
}

/// Lane 0 waits for a flag; the warp learns the outcome. The __syncwarp() after it extends lane
/// 0's acquire to the whole warp before any lane reads the data.
__device__ __forceinline__ bool warp_wait(const uint32_t* flag, uint32_t want, const uint32_t* abort, uint64_t limit_ns) {
  int ok = 1;
  if ((threadIdx.x & 31) == 0) ok = echo::detail::wait_flag(flag, want, abort, limit_ns) ? 1 : 0;
  ok = __shfl_sync(0xffffffffu, ok, 0);
  __syncwarp();
  return ok != 0;
}

/// f(operands, first, valid, u) for the `subs` sub-tiles of a flag tile starting at `first`;
/// sub-tile u + 1's loads are issued before f runs on sub-tile u.
template <class Stages, class T, class S, class F>
__device__ __forceinline__ void over_subtiles(const T* in, const S* state, size_t first, size_t end, int subs,
                                              size_t sub_elems, F&& f) {
  int valid = valid_count(first, end, Stages::V);
  auto next = Stages::fetch(in, state, first, valid);
  for (int u = 0; u < subs; ++u) {
    const auto cur = next;
    const size_t f_first = first;
    const int f_valid = valid;
    first += sub_elems;
    valid = valid_count(first, end, Stages::V);
    if (u + 1 < subs) next = Stages::fetch(in, state, first, valid);
    f(cur, f_first, f_valid, u);
  }
}

}  // namespace detail

/// The three per-tile stages, shared by the fused kernel (cuda_ipc) and the staged kernels
/// (nccl). `first` is the thread's first element, `valid` how many of its V are present.
/// Threads is the number of lanes sharing a tile (its packet layout), tile_threads in Echo.
template <class Q, class T, class S, bool Comp, int Threads>
struct tile_stages {
  using codec = tile_codec<Q, T>;
  static constexpr int V = codec::V;
  static constexpr size_t tile_elems = static_cast<size_t>(Threads) * V;

  /// What the chain stores for an error: 0 for NaN / Inf (comp::error_feedback::keep says why).
  __device__ __forceinline__ static float keep_error(float e) { return comp::error_feedback<>::keep(e); }

  /// The loads of a thread's entry operands (x and the stored error c), issued ahead of use.
  struct operands {
    echo::detail::raw_run<T, V> x;
    echo::detail::raw_run<S, V> c;
  };
  __device__ __forceinline__ static operands fetch(const T* in, const S* state, size_t first, int valid) {
    operands o;
    o.x = echo::detail::load_raw<T, V>(in + first, valid);
    if constexpr (Comp) o.c = echo::detail::load_raw<S, V>(state + first, valid);
    return o;
  }

  /// x' = x + c (the stored error of the chain).
  __device__ __forceinline__ static void entry(const operands& o, float (&x)[V]) {
    echo::detail::widen(o.x, x);
    if constexpr (Comp) {
      float c[V];
      echo::detail::widen(o.c, c);
#pragma unroll
      for (int i = 0; i < V; ++i) x[i] = echo::detail::add_rn(x[i], c[i]);
    }
  }
  __device__ __forceinline__ static void entry(const T* in, const S* state, size_t first, int valid, float (&x)[V]) {
    entry(fetch(in, state, first, valid), x);
  }

  /// A: quantize x' into the packet at dst + offset; store the send error when asked.
  __device__ __forceinline__ static void push(const operands& o, S* state, bool store_error, size_t first, int valid,
                                              unsigned char* dst, size_t offset, int t) {
    float x[V], dq[V];
    entry(o, x);
    codec::encode(x, valid, &dst, 1, -1, offset, Threads, t, dq);
    if constexpr (Comp) {
      if (store_error) {
#pragma unroll
        for (int i = 0; i < V; ++i) dq[i] = keep_error(echo::detail::sub_rn(x[i], dq[i]));
        echo::detail::store_floats<S, V>(state + first, valid, dq);
      }
    }
  }

  /// B: S = sum over ranks 0..P-1 of (own x' | receipt from recv0 + i * recv_stride), one
  /// quantization into the packets at bases[d] + offset (d != skip), own output and error.
  __device__ __forceinline__ static void reduce(const operands& own, T* out, S* state, size_t first, int valid, int me,
                                                int P, const unsigned char* recv0, size_t recv_stride,
                                                unsigned char* const* bases, int nbases, int skip, size_t offset, int t) {
    float acc[V];
    for (int i = 0; i < P; ++i) {
      float term[V];
      if (i == me) entry(own, term);  // the owner's own term is never quantized
      else codec::decode(recv0 + i * recv_stride, Threads, t, term);
#pragma unroll
      for (int v = 0; v < V; ++v) acc[v] = i == 0 ? term[v] : echo::detail::add_rn(acc[v], term[v]);
    }
    float dq[V];
    codec::encode(acc, valid, bases, nbases, skip, offset, Threads, t, dq);
    echo::detail::store_floats<T, V>(out + first, valid, dq);
    if constexpr (Comp) {
#pragma unroll
      for (int v = 0; v < V; ++v)
        dq[v] = keep_error(echo::detail::sub_rn(acc[v], element_traits<T>::to_float(element_traits<T>::from_float(dq[v]))));
      echo::detail::store_floats<S, V>(state + first, valid, dq);
    }
  }

  /// C: dequantize an owner's packet into the output.
  __device__ __forceinline__ static void gather(const unsigned char* packet, T* out, size_t first, int valid, int t) {
    float v[V];
    codec::decode(packet, Threads, t, v);
    echo::detail::store_floats<T, V>(out + first, valid, v);
  }
};

template <class Q, class T, class S, bool Comp, int Threads, int MinBlocks>
__global__ void __launch_bounds__(Threads, MinBlocks) pipeline_kernel(const kernel_params<T, S> p) {
  using stages = tile_stages<Q, T, S, Comp, tile_threads>;
  constexpr int V = stages::V;
  constexpr size_t sub_elems = stages::tile_elems;  // one warp's sub-tile
  const int U = p.subtiles;                          // sub-tiles a flag covers
  const size_t tile_elems = sub_elems * U;
  constexpr int warps = Threads / 32;
  __shared__ uint32_t s_epoch;
  const int lane = threadIdx.x & 31;
  const size_t warp = static_cast<size_t>(blockIdx.x) * warps + threadIdx.x / 32;
  const size_t nwarps = static_cast<size_t>(gridDim.x) * warps;
  uint32_t* const sync = p.sync();
  if (threadIdx.x == 0) s_epoch = *reinterpret_cast<volatile uint32_t*>(sync) + 1;
  __syncthreads();
  const uint32_t epoch = s_epoch;
  const int P = p.ranks, me = p.rank;
  const workspace_layout& L = p.layout;
  const echo::detail::partition part{p.n, p.granule, P};
  size_t b0, len0;
  detail::round_range(p, part, 0, b0, len0);  // segment 0 is never shorter than the others
  const size_t tmax = (len0 + tile_elems - 1) / tile_elems;
  const size_t spread = static_cast<size_t>(P - 1) * tmax;
  const size_t sub_bytes = L.tile_bytes / U;
  bool fail = false;

  // A. push
  for (size_t k = warp; k < spread; k += nwarps) {
    const int j = (me + 1 + static_cast<int>(k % (P - 1))) % P;
    const size_t tile = k / (P - 1);
    size_t b, len;
    detail::round_range(p, part, j, b, len);
    if (tile * tile_elems >= len) continue;
    const int subs = static_cast<int>(min(static_cast<size_t>(U), (len - tile * tile_elems + sub_elems - 1) / sub_elems));
    detail::over_subtiles<stages>(p.in, p.state, b + tile * tile_elems + static_cast<size_t>(lane) * V, b + len, subs,
                                  sub_elems, [&](const auto& ops, size_t first, int valid, int u) {
                                    stages::push(ops, p.state, p.fuse_send_state, first, valid, p.peer[j],
                                                 L.recv_slot(me, tile) + u * sub_bytes, lane);
                                  });
    __syncwarp();
    if (lane == 0) echo::detail::store_release_sys(reinterpret_cast<uint32_t*>(p.peer[j] + L.recv_flag(me, tile)), epoch);
  }

  // B. reduce the own segment
  {
    size_t b, len;
    detail::round_range(p, part, me, b, len);
    const size_t tiles = (len + tile_elems - 1) / tile_elems;
    for (size_t tile = warp; tile < tiles && !fail; tile += nwarps) {
      for (int i = 0; i < P && !fail; ++i)
        if (i != me)
          fail = !detail::warp_wait(reinterpret_cast<const uint32_t*>(p.local + L.recv_flag(i, tile)), epoch, sync + 2,
                                    p.spin_limit_ns);
      if (fail) break;
      const int subs = static_cast<int>(min(static_cast<size_t>(U), (len - tile * tile_elems + sub_elems - 1) / sub_elems));
      detail::over_subtiles<stages>(p.in, p.state, b + tile * tile_elems + static_cast<size_t>(lane) * V, b + len, subs,
                                    sub_elems, [&](const auto& ops, size_t first, int valid, int u) {
                                      stages::reduce(ops, p.out, p.state, first, valid, me, P,
                                                     p.local + L.recv_slot(0, tile) + u * sub_bytes, L.slot_bytes(),
                                                     p.peer, P, me, L.gather_slot(me, tile) + u * sub_bytes, lane);
                                    });
      __syncwarp();
      if (lane == 0)
        for (int j = 0; j < P; ++j)
          if (j != me)
            echo::detail::store_release_sys(reinterpret_cast<uint32_t*>(p.peer[j] + L.gather_flag(me, tile)), epoch);
    }
  }

  // C. gather the other segments
  for (size_t k = warp; k < spread && !fail; k += nwarps) {
    const int j = (me + 1 + static_cast<int>(k % (P - 1))) % P;
    const size_t tile = k / (P - 1);
    size_t b, len;
    detail::round_range(p, part, j, b, len);
    if (tile * tile_elems >= len) continue;
    fail = !detail::warp_wait(reinterpret_cast<const uint32_t*>(p.local + L.gather_flag(j, tile)), epoch, sync + 2,
                              p.spin_limit_ns);
    if (fail) break;
    for (int u = 0; u < U && tile * tile_elems + u * sub_elems < len; ++u) {
      const size_t first = b + tile * tile_elems + u * sub_elems + static_cast<size_t>(lane) * V;
      stages::gather(p.local + L.gather_slot(j, tile) + u * sub_bytes, p.out, first, detail::valid_count(first, b + len, V),
                     lane);
    }
  }
  if (fail && lane == 0) detail::give_up(sync, p.status);

  // The last block to finish advances the epoch for the next launch. Every block read the
  // epoch before counting itself done, so none can see the new value in this launch.
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(sync + 1, 1u) == gridDim.x - 1) {
      sync[1] = 0;
      *reinterpret_cast<volatile uint32_t*>(sync) = epoch;
    }
  }
}

/// Deferred compensation: the send errors e = x' - D(Q(x')) of the segments this rank does not
/// own, recomputed from the same input and state (quantization is deterministic, so the codes
/// are the ones the pipeline sent). Needs the input unchanged since the call.
template <class Q, class T, class S, int Threads, int MinBlocks>
__global__ void __launch_bounds__(Threads, MinBlocks) send_error_kernel(const T* in, S* state, size_t n, size_t granule, int rank, int ranks) {
  using stages = tile_stages<Q, T, S, true, tile_threads>;
  constexpr int V = stages::V;
  constexpr size_t tile_elems = stages::tile_elems;
  const echo::detail::partition part{n, granule, ranks};
  const int lane = threadIdx.x & 31;
  const size_t warp = static_cast<size_t>(blockIdx.x) * (Threads / 32) + threadIdx.x / 32;
  const size_t nwarps = static_cast<size_t>(gridDim.x) * (Threads / 32);
  for (int j = 0; j < ranks; ++j) {
    if (j == rank) continue;
    const size_t b = part.begin(j), len = part.size(j), tiles = (len + tile_elems - 1) / tile_elems;
    for (size_t tile = warp; tile < tiles; tile += nwarps) {
      const size_t first = b + tile * tile_elems + static_cast<size_t>(lane) * V;
      const int valid = detail::valid_count(first, b + len, V);
      float x[V], dq[V];
      stages::entry(in, state, first, valid, x);
      stages::codec::encode(x, valid, nullptr, 0, -1, 0, tile_threads, lane, dq);
#pragma unroll
      for (int i = 0; i < V; ++i) dq[i] = stages::keep_error(echo::detail::sub_rn(x[i], dq[i]));
      echo::detail::store_floats<S, V>(state + first, valid, dq);
    }
  }
}

#endif

}  // namespace echo::collective
