// The test cases every group quantizer policy must pass, instantiated for all its supported
// (bits, group) pairs. A test file defines ECHO_QUANT_POLICY (the policy template) and
// ECHO_QUANT_ZERO_EXACT (1 when zero must decode to exactly zero), then includes this header.
//
// Unsupported bits / groups are rejected by a static_assert in group_contract, which cannot be
// tested at run time; quant/group_params.cpp tests the predicates that static_assert uses.
#pragma once

#ifndef ECHO_QUANT_POLICY
#error "define ECHO_QUANT_POLICY before including quant_suite.hpp"
#endif
#ifndef ECHO_QUANT_ZERO_EXACT
#error "define ECHO_QUANT_ZERO_EXACT before including quant_suite.hpp"
#endif

#include "support/bits.hpp"
#include "support/check.hpp"
#include "support/quant.hpp"
#include "support/random.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

namespace {

using echo_test::coded;
using echo_test::encode_decode;
using echo_test::failure_counter;

/// The error bound of round to nearest: every value inside its group's grid span decodes within
/// s/2 (+ rounding slack, see echo_test::rounding_slack) of itself. A value outside the span is
/// clamped to the nearest end code. The span must cover every value of a group to within half a
/// step (the scale and naive_zero_point's minimum are rounded outward for that), except in a
/// group holding a value beyond the fp16 range: its grid is cut at the largest finite fp16
/// scale / minimum, and values past it clamp (group_params.cuh, naive_zero_point.cuh).
template <class Q>
void check_error_bound(const std::vector<float>& x, const coded<Q>& c, failure_counter& fails) {
  const size_t g = Q::group;
  for (size_t k = 0; k < c.groups(); ++k) {
    const echo::quant::group_params p = c.params(k);
    ECHO_EXPECT(fails, p.finite, "group " << k << " of a finite input has non-finite parameters");
    const double s = p.scale;
    bool beyond_fp16 = false;
    for (size_t i = k * g; i < std::min(c.count, (k + 1) * g); ++i) beyond_fp16 = beyond_fp16 || std::fabs(x[i]) > 65504.0f;
    for (size_t i = k * g; i < std::min(c.count, (k + 1) * g); ++i) {
      const double err = std::fabs(static_cast<double>(x[i]) - c.decoded[i]);
      const double out = echo_test::outside_span<Q>(x[i], p);
      const double bound = s / 2 + echo_test::rounding_slack<Q>(x[i], p);
      ECHO_EXPECT(fails, std::isfinite(c.decoded[i]), "decoded value not finite at " << i << ", x = " << x[i]);
      if (out == 0.0) {
        ECHO_EXPECT(fails, err <= bound,
                    "n = " << c.count << ", i = " << i << ": x = " << x[i] << ", decoded " << c.decoded[i]
                           << ", error " << err << " > s/2 + slack = " << bound << " (s = " << s << ")");
      } else {
        // clamped: the nearest end of the grid
        const auto span = echo_test::grid_span<Q>(p);
        const float end = x[i] < span.first ? span.first : span.second;
        ECHO_EXPECT(fails, c.decoded[i] == end || err <= bound,
                    "clamped x = " << x[i] << " decoded " << c.decoded[i] << ", grid end " << end);
        if (!beyond_fp16)
          ECHO_EXPECT(fails, out <= bound,
                      "x = " << x[i] << " lies " << out << " outside its group's grid (s = " << s << ")");
      }
    }
  }
}

template <class Q>
std::vector<size_t> sizes_for(echo_test::rng& rng) {
  std::vector<size_t> n = echo_test::awkward_sizes();
  n.push_back(Q::group);
  n.push_back(3 * Q::group + 1);
  n.push_back(rng.uniform_int<size_t>(1, 20 * Q::group));
  return n;
}

}  // namespace

#define ECHO_QUANT_TYPES ECHO_TEST_QUANT_CONFIGS(ECHO_QUANT_POLICY)

TEST_CASE_TEMPLATE("packet round trip agrees with the policy's fit/encode/decode, within half a step", Q,
                   ECHO_QUANT_TYPES) {
  using pk = echo::quant::packet<Q>;
  ECHO_TEST_RNG(rng);
  failure_counter fails;
  for (size_t n : sizes_for<Q>(rng)) {
    for (size_t block : {size_t(Q::group), size_t(37)}) {  // magnitudes change at group boundaries, or not
      CAPTURE(n);
      CAPTURE(block);
      const std::vector<float> x = echo_test::activations(rng, n, block);
      const coded<Q> c = encode_decode<Q>(x);
      REQUIRE(c.groups() == (n + Q::group - 1) / Q::group);
      for (size_t k = 0; k < c.groups(); ++k) {
        echo::quant::group_stats st = echo::quant::group_stats::empty();
        const size_t first = k * Q::group, last = std::min(n, first + Q::group);
        for (size_t i = first; i < last; ++i) st.add(x[i]);
        const echo::quant::wire_params w = Q::fit(st), cw = c.wire_params_of(k);
        ECHO_EXPECT(fails, w.p0 == cw.p0 && w.p1 == cw.p1, "group " << k << " parameters differ from Q::fit");
        const echo::quant::group_params p = Q::unpack(w);
        for (size_t i = first; i < last; ++i) {
          const uint32_t q = Q::encode(x[i], p);  // biased (quant/group_params.cuh)
          ECHO_EXPECT(fails, q >= echo::detail::biased(0) && q <= echo::detail::biased(Q::max_code),
                      "code " << echo::detail::unbiased(q) << " outside [0, max_code]");
          ECHO_EXPECT(fails, c.code(k, static_cast<int>(i - first)) == echo::detail::unbiased(q), "packed code differs at " << i);
          ECHO_EXPECT(fails, echo_test::same_bits(c.decoded[i], Q::decode(q, p)), "decoded value differs at " << i);
        }
      }
      check_error_bound<Q>(x, c, fails);
      // deterministic, every byte of the packet written (encode_decode pre-fills 0xA5)
      std::vector<unsigned char> again(pk::bytes(c.groups()), 0x5A);
      pk::encode(x.data(), n, again.data());
      ECHO_EXPECT(fails, again == c.wire, "a second encode gave different bytes");
    }
  }
  CHECK(fails.failures == 0);
}

#if ECHO_QUANT_ZERO_EXACT
TEST_CASE_TEMPLATE("encode rounds x * inv (+ the zero code) once: the nearest code computed in double, ties to even", Q,
                   ECHO_QUANT_TYPES) {
  // The contract (quant/*.cuh): the product and the shift by the zero code are fused, never
  // rounded on their own. In double both are exact for the magnitudes that do not clamp.
  ECHO_TEST_RNG(rng);
  failure_counter fails;
  const bool naive = std::string(Q::name) == "naive_zero_point";
  for (int rep = 0; rep < 20; ++rep) {
    const std::vector<float> x = echo_test::activations(rng, Q::group, Q::group);
    echo::quant::group_stats st = echo::quant::group_stats::empty();
    for (float v : x) st.add(v);
    const echo::quant::group_params p = Q::unpack(Q::fit(st));
    const double zero_code = static_cast<double>(p.bias) - 12582912.0;
    for (float v : x) {
      const double t = naive ? static_cast<double>(v - p.offset) * p.inv : static_cast<double>(v) * p.inv + zero_code;
      const double q = std::min(std::max(std::nearbyint(t), 0.0), static_cast<double>(Q::max_code));
      ECHO_EXPECT(fails, Q::encode(v, p) == echo::detail::biased(static_cast<uint32_t>(q)),
                  "x = " << v << ": code " << echo::detail::unbiased(Q::encode(v, p)) << ", want " << q);
    }
  }
  CHECK(fails.failures == 0);
}

TEST_CASE_TEMPLATE("zero exactness: exact zeros decode to exactly 0", Q, ECHO_QUANT_TYPES) {
  ECHO_TEST_RNG(rng);
  failure_counter fails;
  for (size_t n : sizes_for<Q>(rng)) {
    CAPTURE(n);
    std::vector<float> x = echo_test::activations(rng, n, Q::group);
    for (size_t k = 0; k < n; ++k) {
      const size_t group = k / Q::group;
      if (rng.coin(0.15)) x[k] = rng.coin() ? 0.0f : -0.0f;
      else if (group % 3 == 1) x[k] = std::fabs(x[k]);   // zero at the low end of the range
      else if (group % 3 == 2) x[k] = -std::fabs(x[k]);  // zero at the high end
    }
    x[rng.uniform_int<size_t>(0, n - 1)] = 0.0f;
    const coded<Q> c = encode_decode<Q>(x);
    size_t zeros = 0;
    for (size_t k = 0; k < n; ++k)
      if (x[k] == 0.0f) {
        ++zeros;
        ECHO_EXPECT(fails, c.decoded[k] == 0.0f, "x[" << k << "] = " << x[k] << " decoded to " << c.decoded[k]);
      }
    CHECK(zeros > 0);
    check_error_bound<Q>(x, c, fails);
  }
  CHECK(fails.failures == 0);
}
#endif

TEST_CASE_TEMPLATE("all-equal groups (incl. all zeros) decode to one finite value within half a step", Q,
                   ECHO_QUANT_TYPES) {
  ECHO_TEST_RNG(rng);
  failure_counter fails;
  const float representable = echo::detail::half_bits_to_float(rng.uniform_int<uint16_t>(0x0400u, 0x7BFFu));
  for (float v : {0.0f, -0.0f, 1.0f, -1.0f, rng.normal(), -representable, representable, 1000.5f, 1e-6f, -3e-5f}) {
    for (size_t n : {size_t(Q::group), size_t(7), size_t(2 * Q::group + 5)}) {
      CAPTURE(v);
      CAPTURE(n);
      const std::vector<float> x(n, v);
      const coded<Q> c = encode_decode<Q>(x);
      for (size_t i = 0; i < n; ++i) {
        ECHO_EXPECT(fails, echo_test::same_bits(c.decoded[i], c.decoded[0]), "decoded values differ at " << i);
        if (v == 0.0f) ECHO_EXPECT(fails, c.decoded[i] == 0.0f, "zero decoded to " << c.decoded[i]);
      }
      if (v == 0.0f) ECHO_EXPECT(fails, c.params(0).scale == 0.0f, "all-zero group has scale " << c.params(0).scale);
      check_error_bound<Q>(x, c, fails);
    }
  }
  CHECK(fails.failures == 0);
}

TEST_CASE_TEMPLATE("a tail group shorter than g is coded from its own values; padding codes are 0", Q,
                   ECHO_QUANT_TYPES) {
  using pk = echo::quant::packet<Q>;
  ECHO_TEST_RNG(rng);
  failure_counter fails;
  constexpr size_t g = Q::group;
  for (size_t t : {size_t(1), g / 2 + 1, g - 1, rng.uniform_int<size_t>(1, g - 1)}) {
    const size_t m = rng.uniform_int<size_t>(0, 3), n = m * g + t;
    CAPTURE(t);
    CAPTURE(m);
    const std::vector<float> x = echo_test::activations(rng, n, 29);
    const coded<Q> c = encode_decode<Q>(x);
    REQUIRE(c.groups() == m + 1);
    const coded<Q> tail = encode_decode<Q>(x.data() + m * g, t);
    CHECK(c.same_group_bytes(m, tail, 0));
    CHECK(echo_test::first_difference(c.decoded.data() + m * g, tail.decoded.data(), t) == t);
    if (m > 0) {
      const coded<Q> head = encode_decode<Q>(x.data(), m * g);
      for (size_t k = 0; k < m; ++k) CHECK(c.same_group_bytes(k, head, k));
      CHECK(echo_test::first_difference(c.decoded.data(), head.decoded.data(), m * g) == m * g);
    }
    for (size_t i = t; i < g; ++i) ECHO_EXPECT(fails, c.code(m, static_cast<int>(i)) == 0, "padding code " << i);
    // padding between the regions and at the end is zero
    for (size_t b = c.groups() * pk::code_bytes; b < pk::codes_region(c.groups()); ++b)
      ECHO_EXPECT(fails, c.wire[b] == 0, "code padding byte " << b);
    for (size_t b = pk::param_offset(c.groups(), c.groups()); b < c.wire.size(); ++b)
      ECHO_EXPECT(fails, c.wire[b] == 0, "parameter padding byte " << b);
    check_error_bound<Q>(x, c, fails);
  }
  CHECK(fails.failures == 0);
}

TEST_CASE_TEMPLATE("NaN / Inf make their own group decode to NaN and leave the other groups untouched", Q,
                   ECHO_QUANT_TYPES) {
  ECHO_TEST_RNG(rng);
  failure_counter fails;
  constexpr size_t g = Q::group;
  const float inf = std::numeric_limits<float>::infinity();
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(), inf, -inf}) {
    const size_t n = 5 * g + rng.uniform_int<size_t>(1, g - 1);
    const std::vector<float> clean = echo_test::activations(rng, n, g);
    std::vector<float> dirty = clean;
    const size_t groups = (n + g - 1) / g;
    std::vector<bool> poisoned(groups, false);
    for (int hits = rng.uniform_int(1, 2); hits > 0; --hits) {
      const size_t at = rng.uniform_int<size_t>(0, n - 1);  // the tail group too
      dirty[at] = bad;
      poisoned[at / g] = true;
    }
    CAPTURE(bad);
    CAPTURE(n);
    const coded<Q> c = encode_decode<Q>(clean), d = encode_decode<Q>(dirty);
    for (size_t k = 0; k < groups; ++k) {
      CAPTURE(k);
      const size_t first = k * g, last = std::min(n, first + g);
      if (poisoned[k]) {
        CHECK(d.wire_params_of(k).p0 == echo::detail::half_nan);
        CHECK_FALSE(d.params(k).finite);
        for (size_t i = first; i < last; ++i)
          ECHO_EXPECT(fails, std::isnan(d.decoded[i]), "group " << k << " value " << i << " decoded to " << d.decoded[i]);
      } else {
        CHECK(d.same_group_bytes(k, c, k));
        CHECK(echo_test::first_difference(d.decoded.data() + first, c.decoded.data() + first, last - first) ==
              last - first);
      }
    }
  }
  CHECK(fails.failures == 0);
}

TEST_CASE_TEMPLATE("huge magnitudes clamp (scale saturates at the fp16 maximum), tiny ones stay finite", Q,
                   ECHO_QUANT_TYPES) {
  ECHO_TEST_RNG(rng);
  failure_counter fails;
  constexpr size_t g = Q::group;
  const float fmax = std::numeric_limits<float>::max();
  // group 0: +-1e29..1e30 among ordinary values; group 1: all ~1e30; group 2: all ~-1e30;
  // group 3: just past fp16's range (1e5..1e6); group 4: +-FLT_MAX (hi - lo overflows fp32);
  // group 5: +-1e-30; group 6: fp32 subnormals; group 7: ordinary values (tail).
  const size_t n = 7 * g + 9;
  std::vector<float> x = echo_test::activations(rng, n, g);
  for (size_t i = 0; i < g; ++i) {
    if (rng.coin(0.2)) x[i] = (rng.coin() ? 1.0f : -1.0f) * rng.log_uniform(29.0f, 30.0f);
    x[g + i] = rng.log_uniform(29.0f, 30.0f);
    x[2 * g + i] = -rng.log_uniform(29.0f, 30.0f);
    x[3 * g + i] = (rng.coin() ? 1.0f : -1.0f) * rng.log_uniform(5.0f, 6.0f);
    x[4 * g + i] = rng.coin() ? fmax : -fmax;
    x[5 * g + i] = rng.normal(0.0f, 1e-30f);
    x[6 * g + i] = echo_test::float_of(rng.uniform_int<uint32_t>(1, 0x007FFFFFu) | (rng.coin() ? 0x80000000u : 0u));
  }
  x[0] = 1e30f;  // make sure group 0 saturates
  x[4 * g] = fmax;
  x[4 * g + 1] = -fmax;
  const coded<Q> c = encode_decode<Q>(x);
  for (size_t k = 0; k < c.groups(); ++k) {
    const echo::quant::group_params p = c.params(k);
    CAPTURE(k);
    CHECK(p.finite);
    CHECK(p.scale <= echo_test::max_scale);
    CHECK(std::isfinite(p.offset));
    if (k == 0 || k == 1 || k == 4) CHECK(p.scale == echo_test::max_scale);
    // all below -65504: zero_aware / symmetric saturate the scale; naive_zero_point's minimum is
    // clamped to -65504, above every value, so its step is 0 and the group decodes to -65504
    if (k == 2) CHECK((p.scale == echo_test::max_scale || (p.scale == 0.0f && p.offset == -65504.0f)));
    if (k == 5 || k == 6) CHECK(p.scale == std::ldexp(1.0f, -24));  // rounded up to the least fp16 step
  }
  for (size_t i = 0; i < n; ++i) {
    ECHO_EXPECT(fails, std::isfinite(c.decoded[i]), "x[" << i << "] = " << x[i] << " decoded to " << c.decoded[i]);
    // a group of huge values of one sign decodes beyond the fp16 range on that side
    if (i / g == 1) ECHO_EXPECT(fails, c.decoded[i] >= 65504.0f, "x[" << i << "] = " << x[i] << " decoded to " << c.decoded[i]);
    if (i / g == 2) ECHO_EXPECT(fails, c.decoded[i] <= -65504.0f, "x[" << i << "] = " << x[i] << " decoded to " << c.decoded[i]);
  }
  check_error_bound<Q>(x, c, fails);
  CHECK(fails.failures == 0);
}
