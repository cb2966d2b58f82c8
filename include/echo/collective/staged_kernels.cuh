// The Echo pipeline as three kernels per chunk, for transports that move the packets themselves
// (transport::nccl): push writes packets for every peer into a local send buffer, reduce reads
// the received packets and writes the one packet of the sum, gather dequantizes the owners'
// packets. The per-tile arithmetic is tile_stages, the same as the fused kernel's, so the
// results are bit-identical to it and to echo::reference.
#pragma once

#include "pipeline_kernel.cuh"

namespace echo::collective {

#if ECHO_HAS_CUDA

/// Where one chunk lives: [chunk_offset, chunk_offset + chunk_len) inside every segment, and the
/// buffers that hold its packets: slot(base, r) = base + r * slot_bytes, tile t at + t * tile_bytes.
struct chunk_params {
  size_t n;
  size_t granule;
  int rank;
  int ranks;
  size_t chunk_offset;
  size_t chunk_len;
  size_t slot_bytes;
  size_t tile_bytes;
  unsigned char* send;      ///< P slots: packets for peer j
  unsigned char* recv;      ///< P slots: packets from sender i
  unsigned char* reduced;   ///< 1 slot: the packet of this rank's sum
  unsigned char* gathered;  ///< P slots: owner j's reduced packet
};

namespace detail {

__device__ __forceinline__ void chunk_range(const chunk_params& c, const echo::detail::partition& part, int j,
                                            size_t& begin, size_t& len) {
  const size_t sb = part.begin(j), se = part.end(j), b = sb + c.chunk_offset;
  begin = b < se ? b : se;
  len = b < se ? (se - b < c.chunk_len ? se - b : c.chunk_len) : 0;
}

}  // namespace detail

namespace detail {

/// f(tile, first, valid) for every tile of segment j's share of the chunk that this warp owns.
template <class Stages, int Threads, class F>
__device__ __forceinline__ void warp_tiles(const chunk_params& c, int j, F&& f) {
  const int lane = threadIdx.x & 31;
  const size_t warp = static_cast<size_t>(blockIdx.x) * (Threads / 32) + threadIdx.x / 32;
  const size_t nwarps = static_cast<size_t>(gridDim.x) * (Threads / 32);
  size_t b, len;
  chunk_range(c, echo::detail::partition{c.n, c.granule, c.ranks}, j, b, len);
  const size_t tiles = (len + Stages::tile_elems - 1) / Stages::tile_elems;
  for (size_t tile = warp; tile < tiles; tile += nwarps) {
    const size_t first = b + tile * Stages::tile_elems + static_cast<size_t>(lane) * Stages::V;
    f(tile, first, valid_count(first, b + len, Stages::V));
  }
}

}  // namespace detail

template <class Q, class T, class S, bool Comp, int Threads, int MinBlocks>
__global__ void __launch_bounds__(Threads, MinBlocks) push_kernel(const chunk_params c, const T* in, S* state, bool store_error) {
  using stages = tile_stages<Q, T, S, Comp, tile_threads>;
  for (int d = 1; d < c.ranks; ++d) {
    const int j = (c.rank + d) % c.ranks;
    detail::warp_tiles<stages, Threads>(c, j, [&](size_t tile, size_t first, int valid) {
      stages::push(stages::fetch(in, state, first, valid), state, store_error, first, valid, c.send + j * c.slot_bytes,
                   tile * c.tile_bytes, threadIdx.x & 31);
    });
  }
}

template <class Q, class T, class S, bool Comp, int Threads, int MinBlocks>
__global__ void __launch_bounds__(Threads, MinBlocks) reduce_kernel(const chunk_params c, const T* in, T* out, S* state) {
  using stages = tile_stages<Q, T, S, Comp, tile_threads>;
  unsigned char* const reduced = c.reduced;
  detail::warp_tiles<stages, Threads>(c, c.rank, [&](size_t tile, size_t first, int valid) {
    stages::reduce(stages::fetch(in, state, first, valid), out, state, first, valid, c.rank, c.ranks,
                   c.recv + tile * c.tile_bytes, c.slot_bytes, &reduced, 1, -1, tile * c.tile_bytes, threadIdx.x & 31);
  });
}

template <class Q, class T, class S, bool Comp, int Threads, int MinBlocks>
__global__ void __launch_bounds__(Threads, MinBlocks) gather_kernel(const chunk_params c, T* out) {
  using stages = tile_stages<Q, T, S, Comp, tile_threads>;
  for (int d = 1; d < c.ranks; ++d) {
    const int j = (c.rank + d) % c.ranks;
    detail::warp_tiles<stages, Threads>(c, j, [&](size_t tile, size_t first, int valid) {
      stages::gather(c.gathered + j * c.slot_bytes + tile * c.tile_bytes, out, first, valid, threadIdx.x & 31);
    });
  }
}

#endif

}  // namespace echo::collective
