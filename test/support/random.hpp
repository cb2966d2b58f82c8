// Random inputs for Echo's host tests.
//
// Every test case draws a fresh seed from std::random_device and reports it through doctest's
// INFO (shown with any failing check), so a failure can be replayed: set ECHO_TEST_SEED=<seed>
// in the environment and every case of the run uses that seed instead.
#pragma once

#include <doctest/doctest.h>
#include <echo/dtype.cuh>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace echo_test {

/// A seeded generator that remembers its seed.
struct rng {
  uint64_t seed;
  std::mt19937_64 gen;

  explicit rng(uint64_t s) : seed(s), gen(s) {}

  uint64_t bits64() { return gen(); }
  uint32_t bits32() { return static_cast<uint32_t>(gen() >> 32); }
  /// Uniform integer in [lo, hi].
  template <class I>
  I uniform_int(I lo, I hi) {
    return std::uniform_int_distribution<I>(lo, hi)(gen);
  }
  float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(gen); }
  float normal(float mean = 0.0f, float sd = 1.0f) { return std::normal_distribution<float>(mean, sd)(gen); }
  bool coin(double p = 0.5) { return std::bernoulli_distribution(p)(gen); }
  /// 10^u for u uniform in [lo_exp10, hi_exp10]: magnitudes spread over decades.
  float log_uniform(float lo_exp10, float hi_exp10) { return std::pow(10.0f, uniform(lo_exp10, hi_exp10)); }
};

/// The seed for a new case: ECHO_TEST_SEED if set, else a fresh one from std::random_device.
inline uint64_t fresh_seed() {
  if (const char* s = std::getenv("ECHO_TEST_SEED")) return std::strtoull(s, nullptr, 0);
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

}  // namespace echo_test

/// Declare `var`, a freshly seeded echo_test::rng, and report its seed with every failure of the
/// enclosing scope (INFO is lazily evaluated and scoped, so it must live in the test's scope).
#define ECHO_TEST_RNG(var)                 \
  ::echo_test::rng var{::echo_test::fresh_seed()}; \
  INFO("replay with ECHO_TEST_SEED=" << var.seed)

namespace echo_test {

/// Sizes that are not multiples of anything convenient.
inline const std::vector<size_t>& awkward_sizes() {
  static const std::vector<size_t> s{1, 31, 127, 1000, 4097};
  return s;
}

/// n values shaped like activations: per-block scales spread over decades (a block is `block`
/// values, e.g. a quantization group), normal values within a block, a sprinkling of exact zeros
/// and of repeated values. Never all zeros: at least one value is nonzero.
inline std::vector<float> activations(rng& r, size_t n, size_t block = 64, float lo_exp10 = -3.0f,
                                      float hi_exp10 = 2.0f) {
  std::vector<float> v(n);
  float scale = 1.0f, mean = 0.0f;
  for (size_t k = 0; k < n; ++k) {
    if (k % block == 0) {
      scale = r.log_uniform(lo_exp10, hi_exp10);
      mean = r.coin(0.3) ? r.normal(0.0f, scale) : 0.0f;  // some groups are off-centre
    }
    const double u = r.uniform(0.0f, 1.0f);
    if (u < 0.03) v[k] = 0.0f;
    else if (u < 0.05 && k > 0) v[k] = v[k - 1];
    else v[k] = mean + r.normal(0.0f, scale);
  }
  if (std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; })) v[r.uniform_int<size_t>(0, n - 1)] = 1.0f;
  return v;
}

/// n values uniform in [-a, a] (never all zeros).
inline std::vector<float> uniform_values(rng& r, size_t n, float a = 1.0f) {
  std::vector<float> v(n);
  for (auto& x : v) x = r.uniform(-a, a);
  if (std::all_of(v.begin(), v.end(), [](float x) { return x == 0.0f; })) v[0] = a;
  return v;
}

/// n values of T the way a residual stream looks to an all-reduce: normal, 1 % outliers twenty
/// times larger, 1 % exact zeros; rounded to T. The GPU tests' and the rank processes' inputs.
template <class T>
std::vector<T> random_elements(rng& r, size_t n) {
  std::vector<T> v(n);
  for (auto& x : v) {
    float f = r.normal();
    const float u = r.uniform(0.0f, 1.0f);
    if (u < 0.01f) f *= 20.0f;
    else if (u < 0.02f) f = 0.0f;
    x = echo::element_traits<T>::from_float(f);
  }
  return v;
}

}  // namespace echo_test
