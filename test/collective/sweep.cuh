// The bit-exactness sweep shared by the per-quantizer GPU tests: a quantizer's (bits, group)s
// (test/gpu/CMakeLists.txt lists them) x compensator x element type, at awkward sizes, against
// echo::reference, for both transports; and chains of extreme inputs (Inf, NaN, overflow,
// saturated scales) under every policy tier.
#pragma once

#include "support/gpu_harness.cuh"

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

namespace echo_test {

// A small workspace makes the 1 000 003-element call wrap around cuda_ipc's rings (flow control)
// and cut transport::nccl's call into several chunks.
inline constexpr size_t sweep_max = 1000003;
inline const size_t sweep_sizes[] = {1, 127, 4097, 1000003, 4097};

template <class Q, class C, class T, class Transport>
void sweep_one() {
  echo::all_reduce_options opt;
  opt.workspace_bytes = size_t(256) << 10;
  opt.spin_limit_seconds = 5;
  reference_check<Q, C, T, Transport> rc(sweep_max, opt);
  for (size_t n : sweep_sizes) rc.step(n);
}

/// Inputs where every data group (g values) takes one regime at random: ordinary; past fp16's step
/// range (the group's scale saturates and its codes clamp); huge of one sign; near the type's
/// largest value (sums overflow: in fp32 for bf16 and float, in the output for half); with an Inf;
/// with a NaN; subnormal or signed zeros; constant; on a power-of-two grid whose top value's
/// position is a tie one code past the end (zero_aware: lo = -1.5 s, hi = (max_code - 1.5) s, so
/// s is exact and z = 2; the rest halfway between codes), which must clamp. The codec's clamp-free
/// path (tile_codec::on_grid) and the state's finite-error shortcut (tile_stages::keep_errors)
/// must take none of the groups where the reference clamps or zeroes.
template <class T>
std::vector<T> extreme_elements(rng& r, size_t n, size_t g, uint32_t max_code) {
  const bool half = std::is_same<T, echo::half_t>::value;
  const float big = half ? 3.0e4f : 1.0e6f, huge = half ? 6.0e4f : 1.0e30f, top = half ? 65504.0f : 3.0e38f;
  const float tiny = half ? 1e-6f : 1e-39f;  // subnormal in T
  std::vector<T> v(n);
  int regime = 0;
  float c = 0.0f, step = 1.0f;
  for (size_t i = 0; i < n; ++i) {
    const size_t j = i % g;
    if (j == 0) regime = r.uniform_int<int>(0, 9), c = r.normal(), step = std::ldexp(1.0f, r.uniform_int<int>(-10, 4));
    float f = r.normal();
    switch (regime) {
      case 1: f *= big; break;
      case 2: f = (c < 0 ? -huge : huge) * r.uniform(0.5f, 1.0f); break;
      case 3: f = (r.coin() ? top : -top) * r.uniform(0.9f, 1.0f); break;
      case 4: if (j == 7) f = r.coin() ? INFINITY : -INFINITY; break;
      case 5: if (j == 11) f = NAN; break;
      case 6: f = r.coin() ? (r.coin() ? 0.0f : -0.0f) : f * tiny; break;
      case 7: f = c; break;
      case 8:
        f = j == 0 ? -1.5f * step
            : j == 1 ? (static_cast<float>(max_code) - 1.5f) * step
                     : (static_cast<float>(r.uniform_int<uint32_t>(0, max_code - 2)) - 1.5f) * step;
        break;
      default: break;
    }
    v[i] = echo::element_traits<T>::from_float(f);
  }
  return v;
}

/// Six calls on one chain, extreme inputs then ordinary ones (which the stored errors reach), each
/// checked bit for bit, every other one with the deferred state update; cuda_ipc under its
/// narrow, mid and wide policies.
template <class Q, class C, class T, class Transport>
void extreme_chain() {
  constexpr size_t never = echo::tuning::never;
  const std::pair<size_t, size_t> tiers[] = {{never, never}, {0, never}, {never, 0}};  // mid from, wide from
  const int runs = std::is_same<Transport, echo::transport::cuda_ipc::tag>::value ? 3 : 1;
  const size_t n = 20011;  // a tail group, several tiles
  for (int t = 0; t < runs; ++t) {
    INFO("mid policy from " << tiers[t].first << " B, wide from " << tiers[t].second << " B");
    echo::all_reduce_options opt;
    opt.workspace_bytes = size_t(256) << 10;
    opt.spin_limit_seconds = 5;
    opt.mid_policy_from_bytes = tiers[t].first;
    opt.wide_policy_from_bytes = tiers[t].second;
    reference_check<Q, C, T, Transport> rc(n, opt);
    for (int k = 0; k < 6; ++k) {
      const auto mode = C::keeps_state && k % 2 ? echo::state_update::deferred : echo::state_update::fused;
      if (k % 3 == 2) {
        rc.step(n, false, mode);
        continue;
      }
      std::vector<std::vector<T>> host_in(static_cast<size_t>(rc.ranks()));
      for (int r = 0; r < rc.ranks(); ++r) {
        host_in[static_cast<size_t>(r)] = extreme_elements<T>(rc.random(), n, Q::group, Q::max_code);
        rc.in(r).upload(host_in[static_cast<size_t>(r)]);
      }
      rc.launch(n, false, mode);
      rc.finish(host_in, n);
    }
  }
}

/// Every element type with comp::none, every error storage with one element type, and the
/// extreme chains where a storage's shortcuts depend on T: the data-step storage's clamp-free
/// reduce (float, and bf16 up to 6 bits) and the bf16 state's finite-error shortcut (off for half).
/// Each further (C, T) pair would compile a full set of pipelines (the sweep's build time and
/// size) for code these already reach.
template <class Q, class Transport>
void sweep_quantizer() {
  if (!runnable<Transport>()) return;
  using ef = echo::comp::error_feedback<echo::comp::int8_state>;  // int8 codes of the error
  // the default state: in units of the data step where the grid holds zero, else (naive_zero_point)
  // in units of a step fitted to the errors
  using efs = echo::comp::error_feedback<>;
  using ef16 = echo::comp::error_feedback<echo::bfloat16_t>;
  using none = echo::comp::none;
  sweep_one<Q, none, float, Transport>();
  sweep_one<Q, none, echo::half_t, Transport>();
  sweep_one<Q, none, echo::bfloat16_t, Transport>();
  sweep_one<Q, ef, float, Transport>();
  sweep_one<Q, ef16, echo::half_t, Transport>();
  sweep_one<Q, efs, echo::bfloat16_t, Transport>();
  extreme_chain<Q, none, float, Transport>();
  extreme_chain<Q, none, echo::half_t, Transport>();
  extreme_chain<Q, none, echo::bfloat16_t, Transport>();
  extreme_chain<Q, efs, echo::bfloat16_t, Transport>();
  extreme_chain<Q, efs, float, Transport>();
  extreme_chain<Q, ef, float, Transport>();
  // A bf16 state stores what keep lets through as it is (step8 reads a non-finite group's errors
  // back as 0 whatever they were), so this one sees a wrong finite-error shortcut.
  extreme_chain<Q, ef16, echo::bfloat16_t, Transport>();
}

}  // namespace echo_test

namespace echo_test {
template <int B, int G>
using rotated_zero_aware = echo::quant::rotated<echo::quant::zero_aware<B, G>>;
template <int B, int G>
using rotated_symmetric = echo::quant::rotated<echo::quant::symmetric<B, G>>;
template <int B, int G>
using rotated_naive_zero_point = echo::quant::rotated<echo::quant::naive_zero_point<B, G>>;
}  // namespace echo_test

/// One TEST_CASE per transport for the quantizer QT<B, G> (QT a template of (bits, group); the
/// generated units of test/gpu/CMakeLists.txt hold one B, G each).
#define ECHO_SWEEP_CASE(QT, B, G)                                                                             \
  TEST_CASE(#QT "<" #B "," #G "> cuda_ipc") { echo_test::sweep_quantizer<QT<B, G>, echo::transport::cuda_ipc::tag>(); } \
  TEST_CASE(#QT "<" #B "," #G "> nccl") { echo_test::sweep_quantizer<QT<B, G>, echo::transport::nccl::tag>(); }
