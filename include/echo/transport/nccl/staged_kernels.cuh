// The Echo pipeline as three kernels per chunk, for transports that move the packets themselves
// (transport::nccl): push writes packets for every peer into a local send buffer, reduce reads
// the received packets and writes the one packet of the sum, gather dequantizes the owners'
// packets. The per-tile arithmetic is tile_stages, the same as the fused kernel's, so the
// results are bit-identical to it and to echo::reference.
//
// Every slot starts with a header carrying the call signature: a receiver that finds another
// signature than its own (a peer called with another n, element type or configuration) reports
// status::mismatch instead of reading the packets.
#pragma once

#include "../../collective/tile_stages.cuh"
#include "../../detail/ceil_div.cuh"
#include "../../detail/partition.cuh"
#include "../../error.cuh"

namespace echo::transport::nccl {

#if ECHO_HAS_CUDA

using collective::state_ref;
using collective::tile_stages;

/// The first bytes of every slot of the staged pipeline.
struct slot_header {
  uint32_t sig;
  uint32_t chunk;
  static constexpr size_t bytes = 256;  // keeps the packets 256-byte aligned
};

/// Where one chunk lives: [chunk_offset, chunk_offset + chunk_len) inside every segment, and the
/// buffers that hold its packets: slot(base, r) = base + r * slot_bytes; in a slot, the header,
/// then sub-tile s at header + s * sub_bytes.
/// What the call's last launch writes into the chain's tag (the launches before it write none).
enum class chain_end : int { none, fused, deferred, closed };

struct chunk_params {
  size_t n;
  uint64_t chain_key;       ///< comp::state_header::key of the call (n and the domain of its errors)
  bool keep_own;            ///< the call keeps its own segment's errors (false: it closes its chain)
  unsigned element_type;    ///< echo::dtype of the call
  size_t granule;
  int rank;
  int ranks;
  uint32_t sig;
  uint32_t chunk;
  size_t chunk_offset;
  size_t chunk_len;
  size_t slot_bytes;
  unsigned char* send;      ///< P slots: packets for peer j
  unsigned char* recv;      ///< P slots: packets from sender i
  unsigned char* reduced;   ///< 1 slot: the packet of this rank's sum
  unsigned char* gathered;  ///< P slots: owner j's reduced packet
  unsigned char* state;     ///< the chain's state memory (header first), or null
  chain_end end_chain;      ///< what the call's last gather writes into the tag
  int* status;              ///< host-mapped: status::mismatch when a header disagrees
};

namespace detail {

/// f(sub, first, valid) for every sub-tile of segment j's share of the chunk that this warp owns.
template <class Cfg, class F>
__device__ __forceinline__ void chunk_subtiles(const chunk_params& c, int j, F&& f) {
  const int lane = threadIdx.x & 31;
  const size_t warp = static_cast<size_t>(blockIdx.x) * Cfg::warps + threadIdx.x / 32;
  const size_t nwarps = static_cast<size_t>(gridDim.x) * Cfg::warps;
  const echo::detail::partition part{c.n, c.granule, c.ranks};
  const size_t sb = part.begin(j), se = part.end(j), b = sb + c.chunk_offset;
  if (b >= se) return;
  const size_t len = se - b < c.chunk_len ? se - b : c.chunk_len;
  const size_t subs = echo::detail::ceil_div(len, Cfg::sub_elems);
  for (size_t s = warp; s < subs; s += nwarps) {
    const size_t first = b + s * Cfg::sub_elems + static_cast<size_t>(lane) * Cfg::V;
    f(s, first, collective::detail::valid_count(first, b + len, Cfg::V));
  }
}

/// The chain as the call's push and reduce launches see it. The tag they read is the one before
/// the call: only the call's last launch (a gather, which reads no state) writes it.
inline __device__ state_ref chunk_state(const chunk_params& c) {
  if (!c.state) return {};
  return {c.state + comp::state_header::bytes, c.n,
          comp::state_header::continues(reinterpret_cast<const volatile comp::state_header*>(c.state)->tag, c.chain_key),
          c.keep_own};
}

/// The call's last launch: the chain's tag after it (fused: n; deferred: pending; fresh (0) when a
/// header disagreed in this or an earlier launch of the call: a reduce that saw it wrote no state
/// for its chunk, so the state is partial). Every launch that reads the old tag precedes it on the
/// stream, and the next call's follow it.
inline __device__ void end_chain(const chunk_params& c, bool agree) {
  if (!c.state || c.end_chain == chain_end::none || blockIdx.x != 0 || threadIdx.x != 0) return;
  auto* h = reinterpret_cast<volatile comp::state_header*>(c.state);
  const uint64_t tag = h->tag;
  if (!agree || *reinterpret_cast<volatile int*>(c.status) != 0 || c.end_chain == chain_end::closed) h->tag = 0;
  else if (c.end_chain == chain_end::fused) h->tag = c.chain_key;
  else h->tag = comp::state_header::after_deferred(c.chain_key, c.element_type, comp::state_header::continues(tag, c.chain_key));
}

/// Whether segment j has a share in this chunk (only then do its packets travel).
inline __device__ bool has_share(const chunk_params& c, int j) {
  const echo::detail::partition part{c.n, c.granule, c.ranks};
  return part.begin(j) + c.chunk_offset < part.end(j);
}

/// Whether every slot of `base` that received packets in this chunk (slot r: from rank r, holding
/// segment j = owned ? r : this rank's) carries this call's signature; a block that sees
/// otherwise reports the mismatch.
inline __device__ bool headers_agree(const chunk_params& c, const unsigned char* base, bool owned) {
  __shared__ int ok;
  if (threadIdx.x == 0) {
    ok = 1;
    for (int r = 0; r < c.ranks; ++r) {
      if (r == c.rank || !has_share(c, owned ? r : c.rank)) continue;
      const auto* h = reinterpret_cast<const volatile slot_header*>(base + r * c.slot_bytes);
      if (h->sig != c.sig || h->chunk != c.chunk) ok = 0;
    }
    if (!ok) *reinterpret_cast<volatile int*>(c.status) = static_cast<int>(status::mismatch);
  }
  __syncthreads();
  return ok != 0;
}

inline __device__ void write_header(const chunk_params& c, unsigned char* slot) {
  if (blockIdx.x == 0 && threadIdx.x == 0) *reinterpret_cast<slot_header*>(slot) = {c.sig, c.chunk};
}

}  // namespace detail

template <class Cfg>
__global__ void __launch_bounds__(Cfg::threads, Cfg::policy::blocks_per_sm)
    push_kernel(const chunk_params c, const typename Cfg::element* in, bool store_send_errors) {
  using stages = tile_stages<Cfg>;
  const state_ref st = detail::chunk_state(c);
  for (int d = 1; d < c.ranks; ++d) {
    const int j = (c.rank + d) % c.ranks;
    unsigned char* const slot = c.send + j * c.slot_bytes;
    detail::write_header(c, slot);
    detail::chunk_subtiles<Cfg>(c, j, [&](size_t s, size_t first, int valid) {
      const auto r = stages::push(stages::fetch(in, st, first, valid), st, store_send_errors, first, valid);
      Cfg::codec::store(slot + slot_header::bytes + s * Cfg::sub_bytes, r, threadIdx.x & 31, valid);
    });
  }
}

template <class Cfg>
__global__ void __launch_bounds__(Cfg::threads, Cfg::policy::blocks_per_sm)
    reduce_kernel(const chunk_params c, const typename Cfg::element* in, typename Cfg::element* out) {
  using stages = tile_stages<Cfg>;
  if (!detail::headers_agree(c, c.recv, false)) return;  // slot i: sender i's share of my segment
  const state_ref st = detail::chunk_state(c);
  detail::write_header(c, c.reduced);
  detail::chunk_subtiles<Cfg>(c, c.rank, [&](size_t s, size_t first, int valid) {
    const int lane = threadIdx.x & 31;
    const auto r = stages::reduce(stages::fetch(in, st, first, valid), st, {out, nullptr}, first, valid, {c.rank, c.ranks},
                                  [&](int i) {
                                    return static_cast<const unsigned char*>(c.recv + i * c.slot_bytes + slot_header::bytes +
                                                                             s * Cfg::sub_bytes);
                                  });
    Cfg::codec::store(c.reduced + slot_header::bytes + s * Cfg::sub_bytes, r, lane, valid);
  });
}

template <class Cfg>
__global__ void __launch_bounds__(Cfg::threads, Cfg::policy::blocks_per_sm)
    gather_kernel(const chunk_params c, typename Cfg::element* out) {
  using stages = tile_stages<Cfg>;
  const bool agree = detail::headers_agree(c, c.gathered, true);  // slot j: owner j's segment
  detail::end_chain(c, agree);                                     // also when the headers disagree
  if (!agree) return;
  for (int d = 1; d < c.ranks; ++d) {
    const int j = (c.rank + d) % c.ranks;
    detail::chunk_subtiles<Cfg>(c, j, [&](size_t s, size_t first, int valid) {
      stages::gather(c.gathered + j * c.slot_bytes + slot_header::bytes + s * Cfg::sub_bytes, {out, nullptr}, first, valid,
                     threadIdx.x & 31);
    });
  }
}

#endif

}  // namespace echo::transport::nccl
