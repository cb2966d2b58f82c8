// The one-shot unquantized path for small messages: every rank pushes its whole input to every
// peer, then every rank sums all P inputs itself. One flag round trip instead of the pipeline's
// two, which is what decides latency below a few hundred KiB.
//
// Bit-identical to echo::reference<quant::none> without compensation (and so to the pipeline's
// quant::none path without it): every term of the rank-order fp32 sum is the input itself, exact
// in T, and the sum is rounded once to T. It reads and writes no chain state: an object with a
// compensator passes its chain through such a call untouched (engine.cuh).
#pragma once

#include "../../detail/ceil_div.cuh"
#include "../../detail/dependent_launch.cuh"
#include "../../detail/fp_ops.cuh"
#include "../../detail/vector_io.cuh"
#include "../../epilogue/rows.cuh"
#include "peer_channel.cuh"
#include "workspace_layout.cuh"

namespace echo::transport::cuda_ipc {

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
  uint32_t sig;
  epilogue::job<T> epilogue;  ///< active: the sums go into its residual, and the launch normalises the rows
  workspace_layout layout;
  peer_channel channel;
};

template <class T, int Threads>
__global__ void __launch_bounds__(Threads) oneshot_kernel(const oneshot_params<T> p) {
  constexpr int V = 16 / sizeof(T);  // one 16-byte vector a thread and step
  __shared__ int s_why;
  echo::detail::wait_prior_grid();  // launched by detail::launch_dependent
  const peer_channel channel = p.channel;  // by value: no address of a kernel parameter is taken
  const auto frame = channel.open();
  if (frame.poisoned) return;
  const uint64_t epoch = frame.epoch;
  const launch_channel ch(channel, epoch, p.sig);
  const int P = channel.ranks, me = channel.rank;
  const workspace_layout& L = p.layout;
  const size_t per = echo::detail::ceil_div(p.n, gridDim.x);
  const size_t chunk = echo::detail::ceil_div(per, V) * V, begin = blockIdx.x * chunk;
  const size_t end = begin + chunk < p.n ? begin + chunk : p.n;
  // 1. push this block's range to every peer
  for (size_t i = begin + threadIdx.x * V; i < end; i += Threads * V) {
    const int valid = end - i < size_t(V) ? static_cast<int>(end - i) : V;
    const auto v = echo::detail::load_raw<T, V>(p.in + i, valid);
    for (int d = 1; d < P; ++d) {
      T* dst = reinterpret_cast<T*>(channel.peer[(me + d) % P] + L.oneshot_slot(epoch, me)) + i;
      if (valid == V) *reinterpret_cast<echo::detail::raw_run<T, V>*>(dst) = v;
      else for (int k = 0; k < valid; ++k) dst[k] = reinterpret_cast<const T*>(v.w)[k];
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int d = 1; d < P; ++d) ch.signal((me + d) % P, L.recv_flag(me, blockIdx.x));
    wait_result why = wait_result::ok;
    for (int i = 0; i < P && why == wait_result::ok; ++i)
      if (i != me) why = ch.wait(L.recv_flag(i, blockIdx.x));
    if (why != wait_result::ok) ch.give_up(why);
    s_why = static_cast<int>(why);
  }
  __syncthreads();
  // 2. sum all P inputs in rank order (the own term from the input itself)
  const epilogue::destination<T> to{p.out, p.epilogue.active() ? p.epilogue.residual : nullptr};
  if (s_why == static_cast<int>(wait_result::ok)) {
    for (size_t i = begin + threadIdx.x * V; i < end; i += Threads * V) {
      const int valid = end - i < size_t(V) ? static_cast<int>(end - i) : V;
      float acc[V], term[V];
      for (int r = 0; r < P; ++r) {
        if (r == me) echo::detail::load_floats<T, V>(p.in + i, valid, term);
        else echo::detail::load_floats<T, V, cub::LOAD_CG>(reinterpret_cast<const T*>(channel.local + L.oneshot_slot(epoch, r)) + i, valid, term);
#pragma unroll
        for (int v = 0; v < V; ++v) acc[v] = r == 0 ? term[v] : echo::detail::add_rn(acc[v], term[v]);
      }
      to.store(i, valid, acc);
    }
  }
  if (p.epilogue.active() && channel.grid_sync())
    epilogue::apply_rows<T, epilogue::chunks_in_flight<T>(), epilogue::sum_at::residual>(p.epilogue, p.out, p.n);
  channel.close(epoch);
}

#endif

}  // namespace echo::transport::cuda_ipc
