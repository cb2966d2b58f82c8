// Helpers for testing group quantizers through their wire layout (quant::packet<Q>).
#pragma once

#include <echo/quant/naive_zero_point.cuh>
#include <echo/quant/packet.cuh>
#include <echo/quant/symmetric.cuh>
#include <echo/quant/zero_aware.cuh>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

/// Every supported (bits, group) pair of a group quantizer template, for TEST_CASE_TEMPLATE.
#define ECHO_TEST_QUANT_CONFIGS(Q)                                                                       \
  Q<2, 32>, Q<2, 64>, Q<2, 128>, Q<2, 256>, Q<3, 32>, Q<3, 64>, Q<3, 128>, Q<3, 256>, Q<4, 32>, Q<4, 64>, \
      Q<4, 128>, Q<4, 256>, Q<6, 32>, Q<6, 64>, Q<6, 128>, Q<6, 256>, Q<8, 32>, Q<8, 64>, Q<8, 128>, Q<8, 256>

namespace echo_test {

/// A message of `count` values encoded with packet<Q>, and its decoding.
template <class Q>
struct coded {
  using pk = echo::quant::packet<Q>;
  size_t count = 0;
  std::vector<unsigned char> wire;
  std::vector<float> decoded;

  size_t groups() const { return pk::groups_for(count); }
  echo::quant::wire_params wire_params_of(size_t k) const {
    echo::quant::wire_params w;
    std::memcpy(&w, wire.data() + pk::param_offset(groups(), k), 4);
    return w;
  }
  echo::quant::group_params params(size_t k) const { return Q::unpack(wire_params_of(k)); }
  /// Code i of group k.
  uint32_t code(size_t k, int i) const {
    std::vector<uint32_t> words(pk::code_words);
    std::memcpy(words.data(), wire.data() + pk::code_offset(k), pk::code_bytes);
    return echo::detail::unbiased(pk::get_code(words.data(), i));
  }
  /// The bytes of group k: its codes and its parameters.
  bool same_group_bytes(size_t k, const coded& o, size_t ko) const {
    return std::memcmp(wire.data() + pk::code_offset(k), o.wire.data() + pk::code_offset(ko), pk::code_bytes) == 0 &&
           std::memcmp(wire.data() + pk::param_offset(groups(), k), o.wire.data() + pk::param_offset(o.groups(), ko),
                       4) == 0;
  }
};

template <class Q>
coded<Q> encode_decode(const float* x, size_t count) {
  using pk = echo::quant::packet<Q>;
  coded<Q> c;
  c.count = count;
  c.wire.assign(pk::bytes(pk::groups_for(count)), 0xA5);  // not zero: encode must write every byte
  pk::encode(x, count, c.wire.data());
  c.decoded.assign(count, -12345.0f);
  pk::decode(c.wire.data(), count, c.decoded.data());
  return c;
}
template <class Q>
coded<Q> encode_decode(const std::vector<float>& x) {
  return encode_decode<Q>(x.data(), x.size());
}

/// The two ends of a group's grid, D(0) and D(max_code), as (low, high).
template <class Q>
std::pair<float, float> grid_span(const echo::quant::group_params& p) {
  const float a = Q::decode(echo::detail::biased(0), p), b = Q::decode(echo::detail::biased(Q::max_code), p);
  return {std::min(a, b), std::max(a, b)};
}

/// Slack allowed on top of the half step s/2 of the round-to-nearest error bound.
///
/// The encoders multiply by inv = rn(1/s) instead of dividing by s, and naive_zero_point first
/// forms rn(x - lo) and decodes with one rounded add, lo + q s (q s itself is exact: a code of
/// <= 8 bits times an fp16 scale fits fp32's 24-bit significand). Each of those roundings moves
/// a value by at most one half ulp, 2^-24 relative, of a quantity bounded by |x| + |grid ends|;
/// four of them at most, doubled for margin: 8 * 2^-24 * (|x| + |D(0)| + |D(max)|). That is a
/// relative 5e-7: a real rounding error (a wrong code) would be off by a whole step.
template <class Q>
double rounding_slack(float x, const echo::quant::group_params& p) {
  const auto span = grid_span<Q>(p);
  return 8.0 * std::ldexp(1.0, -24) *
         (std::fabs(static_cast<double>(x)) + std::fabs(static_cast<double>(span.first)) +
          std::fabs(static_cast<double>(span.second)));
}

/// How far x lies outside the group's grid span (0 inside).
template <class Q>
double outside_span(float x, const echo::quant::group_params& p) {
  const auto span = grid_span<Q>(p);
  if (x < span.first) return static_cast<double>(span.first) - x;
  if (x > span.second) return static_cast<double>(x) - span.second;
  return 0.0;
}

/// The group's largest finite fp16 scale: scales are clamped there (header: group_params.cuh).
constexpr float max_scale = 65504.0f;

}  // namespace echo_test
