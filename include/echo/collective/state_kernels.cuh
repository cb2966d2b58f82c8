// The kernel that touches only a rank's own chain state, the deferred update, and its launch,
// which both transports' engines make the same way (it waits on no peer).
#pragma once

#include "../comp/compensator.cuh"
#include "../detail/ceil_div.cuh"
#include "../detail/dependent_launch.cuh"
#include "../detail/partition.cuh"
#include "../detail/preload.cuh"
#include "../dtype.cuh"
#include "../error.cuh"
#include "../quant/none.cuh"
#include "tile_config.cuh"
#include "tile_stages.cuh"

namespace echo::collective {

#if ECHO_HAS_CUDA

/// The deferred half of a state_update::deferred call: the send errors e = x' - D(Q(x')) of the
/// segments this rank does not own, recomputed from the same input and state (quantization is
/// deterministic, so the codes are the ones the call sent). Runs only when the chain's header
/// says a deferred call on n is pending (else it changes nothing); its last block marks the
/// update done. Needs the input unchanged since the call.
template <class Cfg>
__global__ void __launch_bounds__(Cfg::threads) update_kernel(const typename Cfg::element* in, unsigned char* state,
                                                              size_t n, size_t granule, int rank, int ranks) {
  using stages = tile_stages<Cfg>;
  constexpr int V = Cfg::V;
  __shared__ int s_due, s_continues;
  auto* header = reinterpret_cast<volatile comp::state_header*>(state);
  if (threadIdx.x == 0) {
    const uint64_t tag = header->tag;
    s_due = comp::state_header::update_due(tag, comp::state_header::key(n, Cfg::domain),
                                           static_cast<unsigned>(element_traits<typename Cfg::element>::tag));
    s_continues = comp::state_header::update_continues(tag);
  }
  __syncthreads();
  if (s_due) {
    const state_ref st{state + comp::state_header::bytes, n, s_continues != 0};
    const echo::detail::partition part{n, granule, ranks};
    const int lane = threadIdx.x & 31;
    const size_t warp = static_cast<size_t>(blockIdx.x) * Cfg::warps + threadIdx.x / 32;
    const size_t nwarps = static_cast<size_t>(gridDim.x) * Cfg::warps;
    for (int j = 0; j < ranks; ++j) {
      if (j == rank) continue;
      const size_t b = part.begin(j), len = part.size(j), subs = echo::detail::ceil_div(len, Cfg::sub_elems);
      for (size_t s = warp; s < subs; s += nwarps) {
        const size_t first = b + s * Cfg::sub_elems + static_cast<size_t>(lane) * V;
        const int valid = detail::valid_count(first, b + len, V);
        (void)stages::push(stages::fetch(in, st, first, valid), st, true, first, valid);
      }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(const_cast<uint32_t*>(&header->done), 1u) == gridDim.x - 1) {
      header->done = 0;
      if (s_due) header->tag = comp::state_header::key(n, Cfg::domain);
    }
  }
}

/// An engine's run_update: the deferred update of a call of n elements of T through Q by an
/// engine of Config, on this rank's state only, under Config's policy at its blocks a SM. Judged by
/// the launch's own status, never cudaGetLastError(): an error the caller left behind must not
/// fail an update that ran (an echo::chain would stay pending). A failed launch leaves none
/// behind, sets `error` and leaves the object usable.
template <class Config, class Q, class T>
status run_update(const T* in, size_t n, unsigned char* state, int rank, int ranks, int sms, cudaStream_t stream,
                  const char*& error) {
  using Cfg = tile_config<Q, T, typename Config::comp, typename Config::policy>;
  const int grid = sms * Config::policy::blocks_per_sm;
  if (echo::detail::launch_dependent(update_kernel<Cfg>, grid > 0 ? grid : 1, Cfg::threads, stream, false, in, state, n,
                                     echo::detail::granule_of<Q>(), rank, ranks) == cudaSuccess)
    return status::success;
  (void)cudaGetLastError();
  error = "the update kernel's launch failed";
  return status::cuda_error;
}

/// Loads every update kernel an engine of Config may launch (detail/preload.cuh): its quantizer's
/// and the unquantized pipeline's, for each element type.
template <class Config>
void preload_update_kernels() {
  using Q = typename Config::quant;
  using C = typename Config::comp;
  using P = typename Config::policy;
  if constexpr (C::keeps_state)
    echo::detail::preload_kernels(update_kernel<tile_config<Q, float, C, P>>, update_kernel<tile_config<Q, half_t, C, P>>,
                                  update_kernel<tile_config<Q, bfloat16_t, C, P>>,
                                  update_kernel<tile_config<quant::none, float, C, P>>,
                                  update_kernel<tile_config<quant::none, half_t, C, P>>,
                                  update_kernel<tile_config<quant::none, bfloat16_t, C, P>>);
}

#endif

}  // namespace echo::collective
