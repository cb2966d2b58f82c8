// quant/group_params.cuh: group statistics, the fp16 scale rule, and the supported configurations.
#include <echo/quant/group_params.cuh>
#include <echo/quant/naive_zero_point.cuh>
#include <echo/quant/none.cuh>
#include <echo/quant/rotated.cuh>
#include <echo/quant/clipped.cuh>
#include <echo/quant/symmetric.cuh>
#include <echo/quant/traits.cuh>
#include <echo/quant/zero_aware.cuh>

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
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

namespace {

/// What affine_decode promises, for every fp16 scale (0, subnormal, normal, the largest, NaN),
/// every wire zero point the policy can send and every 4-bit code: decode(c) is exactly
/// f (256 s) - (128 + z) s with f = 0.5 + q / 256 and z = bias - code_magic an integer in
/// [0, max_code], as tile_codec::load computes it on the device in one fma. A scale of 0 is
/// compared as a number (the fma gives +0 where q < z would give -0; no encode makes such a code).
template <class Q>
void check_affine_decode(std::initializer_list<uint16_t> zero_points) {
  static_assert(Q::affine_decode && Q::bits == 4, "");
  CAPTURE(Q::name);
  size_t wrong = 0;
  for (uint16_t p1 : zero_points) {
    for (uint32_t sb = 0; sb <= 0x7C00u; ++sb) {
      const uint16_t s_bits = sb == 0x7C00u ? echo::detail::half_nan : static_cast<uint16_t>(sb);
      const eq::group_params p = Q::unpack({s_bits, p1});
      const float z = p.bias - echo::detail::code_magic;
      const bool nan = s_bits == echo::detail::half_nan;
      if (!nan && !(z == std::floor(z) && z >= 0.0f && z <= static_cast<float>(Q::max_code))) ++wrong;
      const float s256 = p.scale * 256.0f, c = (z + 128.0f) * p.scale;
      for (uint32_t q = 0; q <= Q::max_code; ++q) {
        const float want = Q::decode(echo::detail::biased(q), p);
        const float got = std::fma(0.5f + static_cast<float>(q) / 256.0f, s256, -c);
        const bool ok = nan ? std::isnan(got) && std::isnan(want)
                            : p.scale == 0.0f ? got == want : std::memcmp(&got, &want, 4) == 0;
        if (!ok && wrong++ < 5) MESSAGE("s bits " << s_bits << ", p1 " << p1 << ", q " << q << ": " << got << " against " << want);
      }
    }
  }
  CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("affine_decode: the one-fma decode of 4-bit codes is exact for every scale, zero point and code") {
  std::initializer_list<uint16_t> zs = {0x0000, 0x3C00, 0x4000, 0x4200, 0x4400, 0x4500, 0x4600, 0x4700,
                                        0x4800, 0x4880, 0x4900, 0x4980, 0x4A00, 0x4A80, 0x4B00, 0x4B80};  // 0 .. 15
  check_affine_decode<eq::zero_aware<4, 128>>(zs);
  check_affine_decode<eq::zero_aware<4, 32>>(zs);
  check_affine_decode<eq::symmetric<4, 128>>({0});
  static_assert(!eq::naive_zero_point<4, 128>::affine_decode, "naive_zero_point decodes offset + q s");
}

namespace {
// What quant/traits.cuh must refuse: a group quantizer without decode, one with an unsupported
// group, one whose encode returns another type, and a type that names nothing.
struct no_decode {
  static constexpr const char* name = "no_decode";
  static constexpr bool quantizes = true, holds_zero = true, affine_decode = false;
  static constexpr int bits = 4, group = 128;
  static constexpr uint32_t max_code = 15;
  static constexpr size_t code_bytes = 64, param_bytes = 4;
  static eq::wire_params fit(eq::group_stats) { return {}; }
  static eq::group_params unpack(eq::wire_params) { return {}; }
  static float position(float x, const eq::group_params&) { return x; }
  static uint32_t encode(float, const eq::group_params&) { return 0; }
};
struct with_decode : no_decode {
  static float decode(uint32_t, const eq::group_params&) { return 0.0f; }
};
struct odd_group : with_decode {
  static constexpr int group = 48;
};
struct float_codes : with_decode {
  static float encode(float, const eq::group_params&) { return 0.0f; }
};
struct no_sizes {  // everything but the packet's sizes (code_bytes, param_bytes)
  static constexpr const char* name = "no_sizes";
  static constexpr bool quantizes = true, holds_zero = true, affine_decode = false;
  static constexpr int bits = 4, group = 128;
  static constexpr uint32_t max_code = 15;
  static eq::wire_params fit(eq::group_stats) { return {}; }
  static eq::group_params unpack(eq::wire_params) { return {}; }
  static float position(float x, const eq::group_params&) { return x; }
  static uint32_t encode(float, const eq::group_params&) { return 0; }
  static float decode(uint32_t, const eq::group_params&) { return 0.0f; }
};
struct nameless {};
}  // namespace

TEST_CASE("the quantizer contract as traits: every shipped quantizer meets it, a broken one does not") {
  static_assert(eq::is_group_quantizer<eq::zero_aware<4, 128>>::value && eq::is_group_quantizer<eq::symmetric<8, 32>>::value &&
                    eq::is_group_quantizer<eq::naive_zero_point<2, 256>>::value &&
                    eq::is_group_quantizer<eq::rotated<eq::zero_aware<4, 64>>>::value &&
                    eq::is_group_quantizer<eq::clipped<eq::zero_aware<4, 128>, 870>>::value,
                "the group quantizers");
  static_assert(eq::is_quantizer<eq::none>::value && !eq::is_group_quantizer<eq::none>::value, "none sends values as they are");
  CHECK(eq::is_group_quantizer<with_decode>::value);
  CHECK_FALSE(eq::is_group_quantizer<no_decode>::value);
  CHECK_FALSE(eq::is_quantizer<no_decode>::value);
  CHECK_FALSE(eq::is_group_quantizer<odd_group>::value);
  CHECK_FALSE(eq::is_group_quantizer<float_codes>::value);
  CHECK_FALSE(eq::is_group_quantizer<no_sizes>::value);
  CHECK_FALSE(eq::is_quantizer<nameless>::value);
  CHECK_FALSE(eq::is_quantizer<int>::value);
}
