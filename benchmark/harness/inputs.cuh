// Benchmark inputs: N(0, 1) values from a counter-based hash (Box-Muller), never exactly zero.
// Element k of the stream `seed` is a pure function of (seed, k), so any GPU can recompute any
// rank's inputs where it needs them (echo-perf's exact sum) instead of copying them around.
#pragma once

#include <echo/dtype.cuh>

#include <thrust/execution_policy.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/transform.h>

#include <cstdint>

namespace echo_bench {

__host__ __device__ inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// Element k of the N(0, 1) stream `seed` (fp32). Elements 2i and 2i+1 are the two outputs of one
/// Box-Muller pair.
__device__ inline float normal_at(uint64_t seed, size_t k) {
  const size_t i = k / 2;
  const uint64_t h = splitmix64(seed ^ (i * 0xD6E8FEB86659FD93ull));
  // Both uniforms lie strictly inside (0, 1) on a 2^-23 grid offset by half a step, so r > 0 and
  // 2 u2 is never a multiple of 1/2: neither output can be zero.
  const float u1 = (static_cast<float>(static_cast<uint32_t>(h >> 41)) + 0.5f) * 0x1p-23f;
  const float u2 = (static_cast<float>(static_cast<uint32_t>(h >> 8) & 0x7FFFFFu) + 0.5f) * 0x1p-23f;
  const float r = sqrtf(-2.0f * logf(u1));
  float s, c;
  sincospif(2.0f * u2, &s, &c);
  return r * (k % 2 ? s : c);
}

/// Element k of the stream, rounded to T (float, echo::half_t, echo::bfloat16_t or CUDA's own).
template <class T>
struct normal_input {
  uint64_t seed;
  __device__ T operator()(size_t k) const { return echo::element_traits<T>::from_float(normal_at(seed, k)); }
  /// The same element widened back to fp32 (exact).
  __device__ float as_float(size_t k) const { return echo::element_traits<T>::to_float((*this)(k)); }
};

/// x[0, n) = the stream `seed` rounded to T, on `stream` (the current device must own x).
template <class T>
void fill_normal(T* x, size_t n, uint64_t seed, cudaStream_t stream) {
  thrust::transform(thrust::cuda::par.on(stream), thrust::counting_iterator<size_t>(0),
                    thrust::counting_iterator<size_t>(n), x, normal_input<T>{seed});
}

}  // namespace echo_bench
