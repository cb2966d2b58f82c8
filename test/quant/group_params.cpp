// quant/group_params.cuh: group statistics, the fp16 scale rule, and the supported configurations.
#include <echo/quant/group_params.cuh>
#include <echo/quant/zero_aware.cuh>
#include <echo/quant/none.cuh>

#include <doctest/doctest.h>

#include <cmath>
#include <initializer_list>
#include <limits>

namespace eq = echo::quant;

// group_contract<Bits, Group> rejects other configurations with a static_assert on these two
// predicates; a failing static_assert cannot be a run-time test, so the predicates are tested.
TEST_CASE("supported_bits / supported_group list exactly the documented configurations") {
  for (int b = -1; b <= 33; ++b) {
    CAPTURE(b);
    CHECK(eq::detail::supported_bits(b) == (b == 2 || b == 3 || b == 4 || b == 6 || b == 8));
  }
  for (int g = -1; g <= 1024; ++g) {
    CAPTURE(g);
    CHECK(eq::detail::supported_group(g) == (g == 32 || g == 64 || g == 128 || g == 256));
  }
  static_assert(eq::detail::supported_bits(4) && !eq::detail::supported_bits(5), "usable in constant expressions");
  static_assert(eq::zero_aware<4, 128>::max_code == 15 && eq::zero_aware<8, 32>::max_code == 255, "");
  static_assert(eq::zero_aware<4, 128>::quantizes && !echo::quant::none::quantizes, "");
}

TEST_CASE("group_stats: min, max and finiteness; merge equals adding everything") {
  eq::group_stats a = eq::group_stats::empty(), b = eq::group_stats::empty(), all = eq::group_stats::empty();
  CHECK(a.finite);
  for (float x : {1.5f, -2.0f, 0.25f}) {
    a.add(x);
    all.add(x);
  }
  for (float x : {7.0f, -0.5f}) {
    b.add(x);
    all.add(x);
  }
  a.merge(b);
  CHECK(a.lo == -2.0f);
  CHECK(a.hi == 7.0f);
  CHECK(a.finite);
  CHECK(all.lo == a.lo);
  CHECK(all.hi == a.hi);
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    eq::group_stats s = eq::group_stats::empty();
    s.add(1.0f);
    s.add(bad);
    s.add(2.0f);
    CHECK_FALSE(s.finite);
    eq::group_stats t = eq::group_stats::empty();
    t.add(3.0f);
    t.merge(s);
    CHECK_FALSE(t.finite);
  }
}

TEST_CASE("scale_bits: fp16 rounded up, 0 for s <= 0, clamped to the largest finite fp16") {
  using eq::detail::scale_bits;
  CHECK(scale_bits(0.0f) == 0);
  CHECK(scale_bits(-0.0f) == 0);
  CHECK(scale_bits(-1.0f) == 0);
  CHECK(scale_bits(1.0f) == 0x3C00u);
  CHECK(scale_bits(std::nextafter(1.0f, 2.0f)) == 0x3C01u);  // up, not nearest
  CHECK(scale_bits(1e-30f) == 0x0001u);                        // the least fp16 step
  CHECK(scale_bits(65504.0f) == 0x7BFFu);
  CHECK(scale_bits(65505.0f) == 0x7BFFu);  // would round up to inf: clamped
  CHECK(scale_bits(std::numeric_limits<float>::infinity()) == 0x7BFFu);
}

TEST_CASE("unpack widens the wire parameters: scale, 1/scale rounded, finiteness") {
  using Q = eq::zero_aware<4, 64>;
  const eq::group_params p = Q::unpack({0x3800u, 0x4500u});  // s = 0.5, z = 5
  CHECK(p.scale == 0.5f);
  CHECK(p.inv == 2.0f);
  CHECK(p.offset == 5.0f);
  CHECK(p.finite);
  const eq::group_params third = Q::unpack({0x3555u, 0});  // s = 0.333251953125
  CHECK(third.inv == 1.0f / third.scale);
  const eq::group_params z = Q::unpack({0, 0});
  CHECK(z.scale == 0.0f);
  CHECK(z.inv == 0.0f);
  CHECK(z.finite);
  const eq::group_params nf = Q::unpack(eq::detail::non_finite_params);
  CHECK_FALSE(nf.finite);
  CHECK(std::isnan(nf.scale));
}
