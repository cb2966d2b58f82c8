// The residual + RMSNorm epilogue on the device: every block of a grid takes rows in lockstep, a
// row by one warp (when the rows outnumber the grid's warps) or by up to 8 (a decode step's few
// rows), in the order of residual_rms_norm.cuh's sum_order either way. The transports' kernels
// call apply_rows() once the whole message is written (after a grid-wide barrier);
// epilogue_kernel is the same as a launch of its own (transport::nccl, P = 1, a cuda_ipc call outside
// the dispatch table's epilogue_in_launch band, and the unfused baseline of the benchmarks).
#pragma once

#include "../detail/ceil_div.cuh"
#include "../detail/dependent_launch.cuh"
#include "../detail/fp_ops.cuh"
#include "../detail/vector_io.cuh"
#include "destination.cuh"
#include "residual_rms_norm.cuh"

#include <algorithm>

namespace echo::epilogue {

/// Where the all-reduce's values are when the rows start: in out (the rows add them into the
/// residual first: transport::nccl, P = 1, the unfused pair), or already added into the residual
/// by the kernel's stores (destination.cuh; out is then only written).
enum class sum_at { out, residual };

#if ECHO_HAS_CUDA

/// Chunks a lane loads ahead of its first use (InFlight of apply_rows). The tail of a kernel that
/// runs on a resident grid of few warps an SM needs its lanes to keep loads in flight: in the
/// one-shot kernel (2 blocks of 512 an SM) and a launch of its own, 64 bytes of out and of the
/// residual. In the pipeline kernel one: 4 there ran the fused call 1.05x-1.3x the unfused pair
/// from 2 to 16 MiB where 1 ran it 0.99x-1.08x (echo-fused, H200), but raised the pipeline
/// kernels' registers (106 to 144 in those of one block an SM) and spills (in those of three),
/// which the calls without an epilogue run too; with one, ptxas -v gives what it gave without the
/// tail (docs/benchmarks.md, "The fused epilogue", has what the plain calls measured).
template <class E>
ECHO_HD constexpr int chunks_in_flight() {
  return 64 / (sum_order::chunk * static_cast<int>(sizeof(E)));
}

/// Rows of `a` over out (n values, a whole number of rows). Every thread of every block calls it
/// (it synchronises the block). The all-reduce is where From says; out receives the normalised
/// rows. What other blocks of the grid wrote is read through L2 (an L1 line of the input, when
/// in == out, may be stale). Inlined, with InFlight from chunks_in_flight: a call would make ptxas
/// keep the caller's values across it, which raised the transports' kernels' registers and spills.
template <class E, int InFlight, sum_at From>
__device__ __forceinline__ void apply_rows(const job<E>& a, E* out, size_t n) {
  static_assert(InFlight >= 1 && sum_order::slices % InFlight == 0, "apply_rows: InFlight must divide the 8 slices");
  constexpr int C = sum_order::chunk, S = sum_order::slices;
  constexpr int B = InFlight;
  constexpr bool add = From == sum_at::out;
  // The residual as the rows read it: written by other blocks when the kernel's stores added into it.
  constexpr cub::CacheLoadModifier residual_load = add ? cub::LOAD_DEFAULT : cub::LOAD_CG;
  constexpr int max_groups = 32;  // warps of a block of 1024 threads
  __shared__ float slice_sum[max_groups][S];
  const int warps = static_cast<int>(blockDim.x) / 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const size_t H = a.hidden, rows = n / H, chunks = H / C;
  // Warps a row: the most (a power of two up to 8) that still give every row a group at once, so
  // a round of the grid covers every row where it can (1 when the rows fill the grid's warps).
  const size_t grid_warps = static_cast<size_t>(gridDim.x) * warps;
  int G = 1;
  while (G * 2 <= warps && G * 2 <= S && rows * static_cast<size_t>(G * 2) <= grid_warps) G *= 2;
  const int groups = warps / G, g = warp / G, wg = warp % G;
  const size_t stride = static_cast<size_t>(gridDim.x) * groups;
  for (size_t base = static_cast<size_t>(blockIdx.x) * groups; base < rows; base += stride) {
    const size_t row = base + g;
    const bool mine = g < groups && row < rows;
    // Apart (the host checks that the residual overlaps neither out nor the weight): the compiler
    // may issue a chunk's loads before the last chunk's stores.
    E* __restrict__ const res = a.residual + row * H;
    E* __restrict__ const o = out + row * H;
    // L2 fetches this round's row (in the first round) and the next round's while the warps work
    // through it: a hint with no register, where issuing more loads a lane would need them.
    if (mine && wg == 0 && lane == 0) {
      const uint32_t bytes = static_cast<uint32_t>(H * sizeof(E));
      if (base == static_cast<size_t>(blockIdx.x) * groups) {
        if (add) detail::prefetch_l2(o, bytes);
        detail::prefetch_l2(res, bytes);
      }
      if (row + stride < rows) {
        if (add) detail::prefetch_l2(out + (row + stride) * H, bytes);
        detail::prefetch_l2(a.residual + (row + stride) * H, bytes);
      }
    }
    if (mine) {
      float part[S];
#pragma unroll
      for (int v = 0; v < S; ++v) part[v] = 0.0f;
      // pass 1: residual += a (rounded; done already when From is the residual), squares into the
      // slices' partials. A round's loads are all issued before its stores (the stores may alias
      // them, for all the compiler knows).
      for (size_t c0 = 0; c0 < chunks; c0 += static_cast<size_t>(32 * S))
#pragma unroll
      for (int v0 = 0; v0 < S; v0 += B) {
        detail::raw_run<E, C> x[B], r[B];
#pragma unroll
        for (int v = v0; v < v0 + B; ++v) {
          const size_t c = c0 + static_cast<size_t>(v * 32 + lane);
          if (v % G != wg || c >= chunks) continue;
          if (add) x[v - v0] = detail::load_raw<E, C, cub::LOAD_CG>(o + c * C, C);
          r[v - v0] = detail::load_raw<E, C, residual_load>(res + c * C, C);
        }
#pragma unroll
        for (int v = v0; v < v0 + B; ++v) {
          const size_t c = c0 + static_cast<size_t>(v * 32 + lane);
          if (v % G != wg || c >= chunks) continue;
          float xf[C], rf[C];
          detail::widen(r[v - v0], rf);
          if (add) {
            detail::widen(x[v - v0], xf);
#pragma unroll
            for (int k = 0; k < C; ++k)
              rf[k] = element_traits<E>::to_float(element_traits<E>::from_float(detail::add_rn(rf[k], xf[k])));
          }
#pragma unroll
          for (int k = 0; k < C; ++k) part[v] = detail::fma_rn(rf[k], rf[k], part[v]);
          if (add) detail::store_floats<E, C>(res + c * C, C, rf);
        }
      }
#pragma unroll
      for (int v = 0; v < S; ++v) {
        if (v % G != wg) continue;
        float s = part[v];
#pragma unroll
        for (int m = 16; m >= 1; m /= 2) s = detail::add_rn(s, __shfl_xor_sync(0xffffffffu, s, m));
        if (lane == 0) slice_sum[g][v] = s;
      }
    }
    __syncthreads();
    if (mine) {
      const float* s = slice_sum[g];
      const float sum = detail::add_rn(detail::add_rn(detail::add_rn(s[0], s[1]), detail::add_rn(s[2], s[3])),
                                       detail::add_rn(detail::add_rn(s[4], s[5]), detail::add_rn(s[6], s[7])));
      const float inv = inverse_rms(sum, a.hidden, a.epsilon);
      // pass 2: the lane's own chunks again (its residual stores, when it made them, are its to read
      // back)
      for (size_t c0 = 0; c0 < chunks; c0 += static_cast<size_t>(32 * S))
#pragma unroll
      for (int v0 = 0; v0 < S; v0 += B) {
        detail::raw_run<E, C> r[B], w[B];
#pragma unroll
        for (int v = v0; v < v0 + B; ++v) {
          const size_t c = c0 + static_cast<size_t>(v * 32 + lane);
          if (v % G != wg || c >= chunks) continue;
          r[v - v0] = detail::load_raw<E, C, residual_load>(res + c * C, C);
          w[v - v0] = detail::load_raw<E, C>(a.weight + c * C, C);
        }
#pragma unroll
        for (int v = v0; v < v0 + B; ++v) {
          const size_t c = c0 + static_cast<size_t>(v * 32 + lane);
          if (v % G != wg || c >= chunks) continue;
          float rf[C], wf[C];
          detail::widen(r[v - v0], rf);
          detail::widen(w[v - v0], wf);
#pragma unroll
          for (int k = 0; k < C; ++k) rf[k] = normalised<E>(rf[k], inv, wf[k]);
          detail::store_floats<E, C>(o + c * C, C, rf);
        }
      }
    }
    __syncthreads();  // slice_sum is reused by the next round
  }
}

/// The epilogue as a launch of its own, after the launch that wrote the all-reduce (launched by
/// detail::launch_dependent, so it may be scheduled while that one drains).
template <class E, sum_at From>
__global__ void __launch_bounds__(256) epilogue_kernel(const job<E> a, E* out, size_t n) {
  detail::wait_prior_grid();
  apply_rows<E, chunks_in_flight<E>(), From>(a, out, n);
}

/// Launches epilogue_kernel for n values on `sms` SMs: a block of 8 warps a row up to 8 blocks an
/// SM, then rows shared out. `programmatic`: as detail::launch_dependent.
template <sum_at From, class E>
cudaError_t launch_epilogue(const job<E>& a, E* out, size_t n, int sms, cudaStream_t stream, bool programmatic) {
  const size_t rows = n / a.hidden;
  const int grid = static_cast<int>(std::max<size_t>(1, std::min<size_t>(rows, static_cast<size_t>(sms) * 8)));
  return detail::launch_dependent(epilogue_kernel<E, From>, grid, 256, stream, programmatic, a, out, n);
}

#endif

}  // namespace echo::epilogue
