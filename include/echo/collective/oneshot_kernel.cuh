// The one-shot unquantized path for small messages: every rank pushes its whole input to every
// peer, then every rank sums all P inputs itself. One flag round trip instead of the pipeline's
// two, which is what decides latency below a few hundred KiB.
//
// Bit-identical to echo::reference<quant::none> without compensation (and so to the pipeline's
// quant::none path without it): every term of the rank-order fp32 sum is the input itself, exact
// in T, and the sum is rounded once to T. It reads and writes no chain state: an object with a
// compensator passes its chain through such a call untouched (transport/cuda_ipc.cuh).
#pragma once

#include "../detail/ceil_div.cuh"
#include "../detail/dependent_launch.cuh"
#include "../detail/fp_ops.cuh"
#include "../detail/sync.cuh"
#include "../detail/vector_io.cuh"
#include "../error.cuh"
#include "pipeline_kernel.cuh"
#include "workspace_layout.cuh"

namespace echo::collective {

#if ECHO_HAS_CUDA

/// Block b of every rank handles the same range of the message (the grid is a function of n
/// only), so it needs only the flags of block b of its peers: recv_flag(i, b), the same words the
/// pipeline uses for tile b, so a rank calling the one-shot path while a peer calls the pipeline
/// (different n) sees the peer's signature and reports a mismatch.
/// A rank may run one launch ahead of a peer (it waits for the peer's data, not for the peer to
/// have read its own), so data alternates between two halves by epoch parity; a rank two launches
/// ahead is impossible, since every launch waits for every peer's flags.
template <class T>
struct oneshot_params {
  const T* in;
  T* out;
  size_t n;
  int rank;
  int ranks;
  uint32_t sig;
  workspace_layout layout;
  unsigned char* local;        ///< this rank's workspace
  unsigned char* const* peer;  ///< device array: every rank's workspace, as this device maps it
  uint64_t spin_limit_ns;
  int* status;
};

template <class T, int Threads>
__global__ void __launch_bounds__(Threads) oneshot_kernel(const oneshot_params<T> p) {
  constexpr int V = 16 / sizeof(T);  // one 16-byte vector a thread and step
  using echo::detail::wait_result;
  __shared__ int s_why;
  echo::detail::wait_prior_grid();  // launched by detail::launch_dependent
  uint32_t* const sync = reinterpret_cast<uint32_t*>(p.local);
  const auto frame = detail::begin_launch(sync, nullptr, 0, p.status);
  if (frame.poisoned) return;
  const uint64_t epoch = frame.epoch;
  const workspace_layout& L = p.layout;
  const size_t per = echo::detail::ceil_div(p.n, gridDim.x);
  const size_t chunk = echo::detail::ceil_div(per, V) * V, begin = blockIdx.x * chunk;
  const size_t end = begin + chunk < p.n ? begin + chunk : p.n;
  // 1. push this block's range to every peer
  for (size_t i = begin + threadIdx.x * V; i < end; i += Threads * V) {
    const int valid = end - i < size_t(V) ? static_cast<int>(end - i) : V;
    const auto v = echo::detail::load_raw<T, V>(p.in + i, valid);
    for (int d = 1; d < p.ranks; ++d) {
      T* dst = reinterpret_cast<T*>(p.peer[(p.rank + d) % p.ranks] + L.oneshot_slot(epoch, p.rank)) + i;
      if (valid == V) *reinterpret_cast<echo::detail::raw_run<T, V>*>(dst) = v;
      else for (int k = 0; k < valid; ++k) dst[k] = reinterpret_cast<const T*>(v.w)[k];
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const uint64_t mine = echo::detail::flag_stamp(epoch, p.sig);
    for (int d = 1; d < p.ranks; ++d)
      echo::detail::flag_publish(reinterpret_cast<uint64_t*>(p.peer[(p.rank + d) % p.ranks] + L.recv_flag(p.rank, blockIdx.x)),
                                 epoch, mine);
    wait_result why = wait_result::ok;
    for (int i = 0; i < p.ranks && why == wait_result::ok; ++i)
      if (i != p.rank)
        why = echo::detail::wait_flag(reinterpret_cast<const uint64_t*>(p.local + L.recv_flag(i, blockIdx.x)), epoch,
                                      p.sig, sync + echo::detail::sync_words::abort, p.spin_limit_ns);
    if (why != wait_result::ok) detail::give_up(why, sync, p.peer, p.ranks, p.rank, p.status);
    s_why = static_cast<int>(why);
  }
  __syncthreads();
  // 2. sum all P inputs in rank order (the own term from the input itself)
  if (s_why == static_cast<int>(wait_result::ok)) {
    for (size_t i = begin + threadIdx.x * V; i < end; i += Threads * V) {
      const int valid = end - i < size_t(V) ? static_cast<int>(end - i) : V;
      float acc[V], term[V];
      for (int r = 0; r < p.ranks; ++r) {
        if (r == p.rank) echo::detail::load_floats<T, V>(p.in + i, valid, term);
        else echo::detail::load_floats<T, V, cub::LOAD_CG>(reinterpret_cast<const T*>(p.local + L.oneshot_slot(epoch, r)) + i, valid, term);
#pragma unroll
        for (int v = 0; v < V; ++v) acc[v] = r == 0 ? term[v] : echo::detail::add_rn(acc[v], term[v]);
      }
      echo::detail::store_floats<T, V>(p.out + i, valid, acc);
    }
  }
  detail::end_launch(sync, epoch, nullptr, 0);
}

#endif

}  // namespace echo::collective
