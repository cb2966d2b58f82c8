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

template <class Q, class T, class S, bool Comp, int Threads, int MinBlocks>
__global__ void __launch_bounds__(Threads, MinBlocks) push_kernel(const chunk_params c, const T* in, S* state, bool store_error) {
  using stages = tile_stages<Q, T, S, Comp, tile_threads>;
  const int lane = threadIdx.x & 31;
  const size_t warp = static_cast<size_t>(blockIdx.x) * (Threads / 32) + threadIdx.x / 32;
  const size_t nwarps = static_cast<size_t>(gridDim.x) * (Threads / 32);
  const echo::detail::partition part{c.n, c.granule, c.ranks};
  for (int d = 1; d < c.ranks; ++d) {
    const int j = (c.rank + d) % c.ranks;
    size_t b, len;
    detail::chunk_range(c, part, j, b, len);
    const size_t tiles = (len + stages::tile_elems - 1) / stages::tile_elems;
    for (size_t tile = warp; tile < tiles; tile += nwarps) {
      const size_t first = b + tile * stages::tile_elems + static_cast<size_t>(lane) * stages::V;
      const int valid = detail::valid_count(first, b + len, stages::V);
      stages::push(stages::fetch(in, state, first, valid), state, store_error, first, valid,
                   c.send + j * c.slot_bytes, tile * c.tile_bytes, lane);
    }
  }
}

template <class Q, class T, class S, bool Comp, int Threads, int MinBlocks>
__global__ void __launch_bounds__(Threads, MinBlocks) reduce_kernel(const chunk_params c, const T* in, T* out, S* state) {
  using stages = tile_stages<Q, T, S, Comp, tile_threads>;
  const int lane = threadIdx.x & 31;
  const size_t warp = static_cast<size_t>(blockIdx.x) * (Threads / 32) + threadIdx.x / 32;
  const size_t nwarps = static_cast<size_t>(gridDim.x) * (Threads / 32);
  const echo::detail::partition part{c.n, c.granule, c.ranks};
  size_t b, len;
  detail::chunk_range(c, part, c.rank, b, len);
  const size_t tiles = (len + stages::tile_elems - 1) / stages::tile_elems;
  unsigned char* const reduced = c.reduced;
  for (size_t tile = warp; tile < tiles; tile += nwarps) {
    const size_t first = b + tile * stages::tile_elems + static_cast<size_t>(lane) * stages::V;
    const int valid = detail::valid_count(first, b + len, stages::V);
    stages::reduce(stages::fetch(in, state, first, valid), out, state, first, valid, c.rank, c.ranks,
                   c.recv + tile * c.tile_bytes, c.slot_bytes, &reduced, 1, -1, tile * c.tile_bytes, lane);
  }
}

template <class Q, class T, class S, bool Comp, int Threads, int MinBlocks>
__global__ void __launch_bounds__(Threads, MinBlocks) gather_kernel(const chunk_params c, T* out) {
  using stages = tile_stages<Q, T, S, Comp, tile_threads>;
  const int lane = threadIdx.x & 31;
  const size_t warp = static_cast<size_t>(blockIdx.x) * (Threads / 32) + threadIdx.x / 32;
  const size_t nwarps = static_cast<size_t>(gridDim.x) * (Threads / 32);
  const echo::detail::partition part{c.n, c.granule, c.ranks};
  for (int d = 1; d < c.ranks; ++d) {
    const int j = (c.rank + d) % c.ranks;
    size_t b, len;
    detail::chunk_range(c, part, j, b, len);
    const size_t tiles = (len + stages::tile_elems - 1) / stages::tile_elems;
    for (size_t tile = warp; tile < tiles; tile += nwarps) {
      const size_t first = b + tile * stages::tile_elems + static_cast<size_t>(lane) * stages::V;
      stages::gather(c.gathered + j * c.slot_bytes + tile * c.tile_bytes, out, first,
                     detail::valid_count(first, b + len, stages::V), lane);
    }
  }
}

#endif

}  // namespace echo::collective
