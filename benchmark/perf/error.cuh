// echo-perf's error column: one rank's output against the exact (fp64) sum of every rank's
// inputs, computed on that rank's GPU. The inputs are the harness's counter-based N(0, 1)
// streams, so the GPU recomputes every rank's input of element k instead of receiving it.
#pragma once

#include "../harness/context.cuh"
#include "../harness/inputs.cuh"

#include <thrust/execution_policy.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/transform_reduce.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace echo_perf {

/// Normwise relative errors of an output: max |out - exact| / max |exact| and
/// ||out - exact||_2 / ||exact||_2.
struct error_report {
  double max_rel = 0, rms_rel = 0;
};

struct error_sums {
  double max_err, sum_err2, max_ref, sum_ref2;
};

struct error_combine {
  __host__ __device__ error_sums operator()(const error_sums& a, const error_sums& b) const {
    return {a.max_err > b.max_err ? a.max_err : b.max_err, a.sum_err2 + b.sum_err2,
            a.max_ref > b.max_ref ? a.max_ref : b.max_ref, a.sum_ref2 + b.sum_ref2};
  }
};

template <class T>
struct error_at {
  const T* out;
  uint64_t seeds[echo_bench::k_max_ranks];
  int ranks;
  __device__ error_sums operator()(size_t k) const {
    double exact = 0;  // exact: at most 8 terms, each with a 24-bit (or shorter) significand
    for (int p = 0; p < ranks; ++p) exact += echo_bench::normal_input<T>{seeds[p]}.as_float(k);
    const double d = static_cast<double>(echo::element_traits<T>::to_float(out[k])) - exact;
    return {fabs(d), d * d, fabs(exact), exact * exact};
  }
};

/// The worst error over the ranks of out[0, n) on every rank, where rank p's input was the
/// stream seed_of(p) rounded to T. Synchronous.
template <class T, class Seed>
error_report output_error(echo_bench::bench_context& ctx, size_t n, Seed&& seed_of) {
  error_at<T> f{};
  f.ranks = ctx.size();
  for (int p = 0; p < ctx.size(); ++p) f.seeds[p] = seed_of(p);
  error_report worst;
  for (int r = 0; r < ctx.size(); ++r) {
    const echo_bench::rank_res& R = ctx.rank(r);
    ECHO_CUDA_TRY(cudaSetDevice(R.device));
    f.out = static_cast<const T*>(R.out);
    const error_sums s = thrust::transform_reduce(thrust::cuda::par.on(R.stream), thrust::counting_iterator<size_t>(0),
                                                  thrust::counting_iterator<size_t>(n), f, error_sums{0, 0, 0, 0},
                                                  error_combine{});
    const double max_rel = s.max_ref > 0 ? s.max_err / s.max_ref : s.max_err;
    const double rms_rel = s.sum_ref2 > 0 ? std::sqrt(s.sum_err2 / s.sum_ref2) : std::sqrt(s.sum_err2);
    worst.max_rel = std::max(worst.max_rel, max_rel);
    worst.rms_rel = std::max(worst.rms_rel, rms_rel);
  }
  return worst;
}

}  // namespace echo_perf
