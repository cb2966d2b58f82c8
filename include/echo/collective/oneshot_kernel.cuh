// The one-shot 16-bit path for small messages without compensation: every rank pushes its whole
// input to every peer, then every rank sums all P inputs itself. One flag round trip instead of
// the pipeline's two, which is what decides latency below a few hundred KiB.
//
// Bit-identical to the pipeline's quant::none path without compensation (and so to
// echo::reference): there x' = x is exact in T, every term of the rank-order fp32 sum is the
// same value whichever rank owns the segment, and the sum is rounded once to T.
#pragma once

#include "../detail/fp_ops.cuh"
#include "../detail/sync.cuh"
#include "../detail/vector_io.cuh"
#include "../error.cuh"

namespace echo::collective {

#if ECHO_HAS_CUDA

/// The one-shot region at the end of the workspace:
///   [ flags: P senders x max_blocks u32 ][ 2 halves x P senders x slot_bytes ]
/// A rank may run one launch ahead of a peer (it waits for the peer's data, not for the peer to
/// have read its own), so data alternates between two halves by epoch parity; a rank two
/// launches ahead is impossible, since every launch waits for every peer's flags.
struct oneshot_layout {
  static constexpr int max_blocks = 64;
  static constexpr size_t slot_bytes = size_t(1) << 20;  ///< the largest one-shot message
  int ranks = 0;
  ECHO_HOST_DEVICE size_t flags_bytes() const { return (static_cast<size_t>(ranks) * max_blocks * 4 + 255) & ~size_t(255); }
  ECHO_HOST_DEVICE size_t total() const { return flags_bytes() + 2 * static_cast<size_t>(ranks) * slot_bytes; }
  ECHO_HOST_DEVICE size_t flag(int sender, int block) const { return (static_cast<size_t>(sender) * max_blocks + block) * 4; }
  ECHO_HOST_DEVICE size_t slot(uint32_t epoch, int sender) const {
    return flags_bytes() + ((epoch & 1u) * static_cast<size_t>(ranks) + sender) * slot_bytes;
  }
};

template <class T>
struct oneshot_params {
  const T* in;
  T* out;
  size_t n;
  int rank;
  int ranks;
  oneshot_layout layout;
  unsigned char* local;        ///< this rank's workspace
  unsigned char* const* peer;  ///< device array: every rank's workspace, as this device sees it
  size_t region;               ///< offset of the one-shot region in every workspace
  uint64_t spin_limit_ns;
  int* status;
};

/// Block b of every rank handles the same range of the message (the grid is a function of n
/// only), so it needs only the flags of block b of its peers.
template <class T, int Threads>
__global__ void __launch_bounds__(Threads) oneshot_kernel(const oneshot_params<T> p) {
  constexpr int V = 16 / sizeof(T);  // one 16-byte vector a thread and step
  __shared__ uint32_t s_epoch;
  __shared__ int s_ok;
  uint32_t* const sync = reinterpret_cast<uint32_t*>(p.local);  // epoch, done, abort: shared with the pipeline
  unsigned char* const mine = p.local + p.region;
  if (threadIdx.x == 0) s_epoch = *reinterpret_cast<volatile uint32_t*>(sync) + 1;
  __syncthreads();
  const uint32_t epoch = s_epoch;
  const size_t per = (p.n + gridDim.x - 1) / gridDim.x;
  const size_t chunk = (per + V - 1) / V * V, begin = blockIdx.x * chunk;
  const size_t end = begin + chunk < p.n ? begin + chunk : p.n;
  // 1. push this block's range to every peer
  for (size_t i = begin + threadIdx.x * V; i < end; i += Threads * V) {
    float v[V];
    const int valid = end - i < size_t(V) ? static_cast<int>(end - i) : V;
    echo::detail::load_floats<T, V>(p.in + i, valid, v);
    for (int d = 1; d < p.ranks; ++d) {
      const int j = (p.rank + d) % p.ranks;
      echo::detail::store_floats<T, V>(reinterpret_cast<T*>(p.peer[j] + p.region + p.layout.slot(epoch, p.rank)) + i, valid, v);
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int d = 1; d < p.ranks; ++d) {
      const int j = (p.rank + d) % p.ranks;
      echo::detail::store_release_sys(reinterpret_cast<uint32_t*>(p.peer[j] + p.region + p.layout.flag(p.rank, blockIdx.x)), epoch);
    }
    int ok = 1;
    for (int i = 0; i < p.ranks && ok; ++i)
      if (i != p.rank)
        ok = echo::detail::wait_flag(reinterpret_cast<const uint32_t*>(mine + p.layout.flag(i, blockIdx.x)), epoch,
                                     sync + 2, p.spin_limit_ns);
    if (!ok) {
      atomicExch(sync + 2, 1u);
      *reinterpret_cast<volatile int*>(p.status) = static_cast<int>(status::timeout);
      __threadfence_system();
    }
    s_ok = ok;
  }
  __syncthreads();
  // 2. sum all P inputs in rank order (own term from the input itself)
  if (s_ok) {
    for (size_t i = begin + threadIdx.x * V; i < end; i += Threads * V) {
      const int valid = end - i < size_t(V) ? static_cast<int>(end - i) : V;
      float acc[V], term[V];
      for (int r = 0; r < p.ranks; ++r) {
        if (r == p.rank) echo::detail::load_floats<T, V>(p.in + i, valid, term);
        else echo::detail::load_floats_cg<T, V>(reinterpret_cast<const T*>(mine + p.layout.slot(epoch, r)) + i, valid, term);
#pragma unroll
        for (int v = 0; v < V; ++v) acc[v] = r == 0 ? term[v] : echo::detail::add_rn(acc[v], term[v]);
      }
      echo::detail::store_floats<T, V>(p.out + i, valid, acc);
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(sync + 1, 1u) == gridDim.x - 1) {
      sync[1] = 0;
      *reinterpret_cast<volatile uint32_t*>(sync) = epoch;
    }
  }
}

#endif

}  // namespace echo::collective
