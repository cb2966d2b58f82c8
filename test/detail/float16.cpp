// echo::detail fp16 / bf16 conversions against GCC's _Float16 and simple references.
#include <echo/detail/float16.cuh>

#include "support/bits.hpp"
#include "support/random.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

using echo::detail::bf16_bits_to_float;
using echo::detail::float_to_bf16_bits;
using echo::detail::float_to_half_bits;
using echo::detail::half_bits_to_float;
using echo::detail::round_mode;
using echo_test::bits_of;
using echo_test::float_of;

#if defined(__FLT16_MAX__) && (defined(__x86_64__) || defined(__aarch64__))
#define ECHO_TEST_HAVE_FLOAT16 1
#else
#define ECHO_TEST_HAVE_FLOAT16 0
#endif

namespace {

#if ECHO_TEST_HAVE_FLOAT16
// The compiler's own conversion (IEEE round to nearest even; libgcc's soft-fp on x86-64).
uint16_t gcc_half_bits(float f) {
  volatile float vf = f;  // keep the conversion at run time
  const _Float16 h = static_cast<_Float16>(vf);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}
float gcc_half_to_float(uint16_t b) {
  _Float16 h;
  std::memcpy(&h, &b, 2);
  volatile _Float16 vh = h;
  return static_cast<float>(vh);
}
#endif

bool half_is_nan(uint16_t h) { return (h & 0x7C00u) == 0x7C00u && (h & 0x3FFu) != 0; }

// Position of a non-NaN half in the order of the values it encodes (+0 and -0 both 0).
int half_key(uint16_t h) { return (h & 0x8000u) ? -static_cast<int>(h & 0x7FFFu) : static_cast<int>(h); }

// A failure message naming the input and the results in hex.
std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%X", v);
  return buf;
}

// Floats worth checking any fp16 conversion on: every tie between two adjacent finite halves
// (and one float ulp either side of it), the overflow threshold, subnormals of both formats,
// infinities, zeros.
std::vector<float> edge_floats() {
  std::vector<float> v;
  for (uint32_t h = 0; h < 0x7C00u; ++h) {  // positive finite halves; negatives added below
    const double a = half_bits_to_float(static_cast<uint16_t>(h));
    const double b = h + 1 == 0x7C00u ? 65536.0 : static_cast<double>(half_bits_to_float(static_cast<uint16_t>(h + 1)));
    const float mid = static_cast<float>((a + b) / 2);  // exact: 12 significant bits
    REQUIRE(static_cast<double>(mid) == (a + b) / 2);
    v.push_back(static_cast<float>(a));
    v.push_back(mid);
    v.push_back(std::nextafter(mid, 0.0f));
    v.push_back(std::nextafter(mid, 1e30f));
  }
  for (float f : {0.0f, 65504.0f, 65519.996f, 65520.0f, 65535.0f, 65536.0f, 1e5f, 3.4e38f,
                  std::numeric_limits<float>::max(), std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::min(), std::numeric_limits<float>::denorm_min(),
                  std::ldexp(1.0f, -24), std::ldexp(1.0f, -25), std::ldexp(1.5f, -25), std::ldexp(1.0f, -26),
                  std::ldexp(3.0f, -26), std::ldexp(1.0f, -14), std::ldexp(1023.5f, -24), std::ldexp(1.0f, -30)})
    v.push_back(f);
  const size_t positive = v.size();
  for (size_t k = 0; k < positive; ++k) v.push_back(-v[k]);
  return v;
}

std::vector<float> random_floats(echo_test::rng& r, size_t n) {
  std::vector<float> v;
  v.reserve(2 * n);
  for (size_t k = 0; k < n; ++k) v.push_back(float_of(r.bits32()));  // any pattern, NaNs included
  for (size_t k = 0; k < n; ++k) {                                     // exponents around fp16's range
    const uint32_t exp = r.uniform_int<uint32_t>(127 - 28, 127 + 17);
    v.push_back(float_of((r.bits32() & 0x807FFFFFu) | (exp << 23)));
  }
  return v;
}

const std::vector<float> nans{std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                              std::numeric_limits<float>::signaling_NaN(), float_of(0x7F800001u),
                              float_of(0xFFFFFFFFu), float_of(0x7FC12345u)};

}  // namespace

TEST_CASE("float_to_half_bits (nearest even) equals GCC's _Float16 conversion bit for bit") {
#if ECHO_TEST_HAVE_FLOAT16
  ECHO_TEST_RNG(rng);
  std::vector<float> in = edge_floats();
  const std::vector<float> rnd = random_floats(rng, 1u << 21);
  in.insert(in.end(), rnd.begin(), rnd.end());
  size_t checked = 0, failures = 0;
  for (float f : in) {
    if (std::isnan(f)) continue;  // NaN is checked below: Echo canonicalizes, GCC keeps payloads
    const uint16_t got = float_to_half_bits(f), want = gcc_half_bits(f);
    ++checked;
    if (got != want && ++failures <= 10) {
      INFO("x = " << f << " (" << hex(bits_of(f)) << "): echo " << hex(got) << ", gcc " << hex(want));
      CHECK(got == want);
    }
    // the default argument is nearest even
    if (float_to_half_bits(f, round_mode::nearest_even) != got && ++failures <= 10) FAIL_CHECK("mode default");
  }
  CHECK(failures == 0);
  MESSAGE("compared " << checked << " floats");
#else
  MESSAGE("skipped: this compiler has no _Float16");
#endif
}

TEST_CASE("float_to_half_bits: NaN -> 0x7FFF in every mode, infinities and overflow") {
  for (float f : nans)
    for (round_mode m : {round_mode::nearest_even, round_mode::up, round_mode::down}) {
      INFO("nan " << hex(bits_of(f)) << " mode " << static_cast<int>(m));
      CHECK(float_to_half_bits(f, m) == 0x7FFFu);
    }
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(float_to_half_bits(inf) == 0x7C00u);
  CHECK(float_to_half_bits(-inf) == 0xFC00u);
  CHECK(float_to_half_bits(65504.0f) == 0x7BFFu);
  CHECK(float_to_half_bits(65519.996f) == 0x7BFFu);  // below the tie with 2^16
  CHECK(float_to_half_bits(65520.0f) == 0x7C00u);    // the tie rounds to "even" infinity
  CHECK(float_to_half_bits(-1e6f) == 0xFC00u);
  CHECK(float_to_half_bits(1e6f, round_mode::down) == 0x7BFFu);
  CHECK(float_to_half_bits(1e6f, round_mode::up) == 0x7C00u);
  CHECK(float_to_half_bits(-1e6f, round_mode::up) == 0xFBFFu);
  CHECK(float_to_half_bits(-1e6f, round_mode::down) == 0xFC00u);
  // subnormals: 2^-24 is the smallest; 2^-25 is a tie with 0 (even); a bit more rounds up
  CHECK(float_to_half_bits(std::ldexp(1.0f, -24)) == 0x0001u);
  CHECK(float_to_half_bits(std::ldexp(1.0f, -25)) == 0x0000u);
  CHECK(float_to_half_bits(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 0x0001u);
  CHECK(float_to_half_bits(std::ldexp(3.0f, -25)) == 0x0002u);  // 1.5 ulp: tie to even (2)
  CHECK(float_to_half_bits(-std::ldexp(1.0f, -25)) == 0x8000u);
  CHECK(float_to_half_bits(std::ldexp(1023.5f, -24)) == 0x0400u);  // largest subnormal carries into the smallest normal
  CHECK(float_to_half_bits(std::numeric_limits<float>::denorm_min()) == 0x0000u);
  CHECK(float_to_half_bits(std::numeric_limits<float>::denorm_min(), round_mode::up) == 0x0001u);
  CHECK(float_to_half_bits(-std::numeric_limits<float>::denorm_min(), round_mode::down) == 0x8001u);
  CHECK(float_to_half_bits(-0.0f) == 0x8000u);
}

TEST_CASE("float_to_half_bits round_mode::up / down bracket the value with adjacent halves") {
  ECHO_TEST_RNG(rng);
  std::vector<float> in = edge_floats();
  const std::vector<float> rnd = random_floats(rng, 1u << 20);
  in.insert(in.end(), rnd.begin(), rnd.end());
  size_t failures = 0;
  for (float f : in) {
    if (std::isnan(f)) continue;
    const uint16_t up = float_to_half_bits(f, round_mode::up), dn = float_to_half_bits(f, round_mode::down),
                   ne = float_to_half_bits(f);
    const float fu = half_bits_to_float(up), fd = half_bits_to_float(dn);
    const int gap = half_key(up) - half_key(dn);
    const bool exact = fu == f;  // f representable: both modes return it
    bool ok = !half_is_nan(up) && !half_is_nan(dn) && fd <= f && f <= fu && (exact ? gap == 0 && fd == f : gap == 1);
    // nearest even is one of the two, the nearer one, and the even one on a tie
    if (ok && !exact) {
      const double du = static_cast<double>(std::isinf(fu) ? 65536.0f : fu) - f;
      const double dd = f - static_cast<double>(std::isinf(fd) ? -65536.0f : fd);
      const uint16_t nearest = du < dd ? up : dd < du ? dn : ((up & 1u) ? dn : up);
      ok = ne == nearest;
    } else if (ok) {
      ok = ne == up;
    }
    if (!ok && ++failures <= 10) {
      INFO("x = " << f << " (" << hex(bits_of(f)) << "): down " << hex(dn) << ", up " << hex(up) << ", nearest "
                  << hex(ne));
      FAIL_CHECK("bracketing");
    }
  }
  CHECK(failures == 0);
}

TEST_CASE("half_bits_to_float: exhaustive over all 65536 patterns") {
  size_t failures = 0;
  for (uint32_t h = 0; h <= 0xFFFFu; ++h) {
    const uint16_t b = static_cast<uint16_t>(h);
    const float f = half_bits_to_float(b);
    bool ok = true;
#if ECHO_TEST_HAVE_FLOAT16
    ok = echo_test::same_bits(f, gcc_half_to_float(b));  // widening is exact: must match GCC
#endif
    if (half_is_nan(b)) {
      ok = ok && std::isnan(f) && float_to_half_bits(f) == 0x7FFFu;
    } else {
      // round trip in every mode (the value is representable, so no mode may move it)
      ok = ok && !std::isnan(f) && float_to_half_bits(f) == b && float_to_half_bits(f, round_mode::up) == b &&
           float_to_half_bits(f, round_mode::down) == b;
    }
    if (!ok && ++failures <= 10) {
      INFO("half " << hex(h) << " -> " << f << " (" << hex(bits_of(f)) << ") -> " << hex(float_to_half_bits(f)));
      FAIL_CHECK("round trip");
    }
  }
  CHECK(failures == 0);
}

namespace {
// bf16 round to nearest even, from the two candidates and exact (double) distances.
uint16_t reference_bf16(float f) {
  if (std::isnan(f)) return 0x7FFFu;
  const uint32_t u = bits_of(f);
  const uint16_t t = static_cast<uint16_t>(u >> 16);  // toward zero
  if ((u & 0xFFFFu) == 0) return t;
  const uint16_t a = t, b = static_cast<uint16_t>(t + 1);  // b is one ulp away from zero (maybe inf)
  auto value = [](uint16_t x) {
    const double v = bf16_bits_to_float(x);
    return std::isinf(v) ? std::copysign(std::ldexp(1.0, 128), v) : v;
  };
  const double da = std::fabs(static_cast<double>(f) - value(a)), db = std::fabs(value(b) - static_cast<double>(f));
  if (da < db) return a;
  if (db < da) return b;
  return (a & 1u) ? b : a;
}
}  // namespace

TEST_CASE("float_to_bf16_bits rounds to nearest even; NaN -> 0x7FFF; widening is exact") {
  ECHO_TEST_RNG(rng);
  std::vector<float> in = random_floats(rng, 1u << 20);
  for (size_t k = 0; k < (1u << 18); ++k) {  // ties and their neighbours
    const uint32_t u = (rng.bits32() & 0xFFFF0000u) | 0x8000u;
    in.push_back(float_of(u));
    in.push_back(float_of(u - 1));
    in.push_back(float_of(u + 1));
  }
  for (float f : {0.0f, -0.0f, 1.0f, std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                  float_of(0x7F7F7FFFu), float_of(0x7F7F8000u), float_of(0x7F7F8001u), float_of(0x7F7E8000u),
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::denorm_min(), float_of(0x00008000u), float_of(0x00018000u)})
    in.push_back(f);
  in.insert(in.end(), nans.begin(), nans.end());
  size_t failures = 0;
  for (float f : in) {
    const uint16_t got = float_to_bf16_bits(f), want = reference_bf16(f);
    if (got != want && ++failures <= 10) {
      INFO("x = " << f << " (" << hex(bits_of(f)) << "): echo " << hex(got) << ", reference " << hex(want));
      FAIL_CHECK("bf16");
    }
  }
  CHECK(failures == 0);
  CHECK(float_to_bf16_bits(std::numeric_limits<float>::max()) == 0x7F80u);  // rounds up to inf
  for (float f : nans) CHECK(float_to_bf16_bits(f) == 0x7FFFu);
  for (uint32_t b = 0; b <= 0xFFFFu; ++b) {
    const float f = bf16_bits_to_float(static_cast<uint16_t>(b));
    REQUIRE(bits_of(f) == b << 16);
    if (!std::isnan(f)) REQUIRE(float_to_bf16_bits(f) == b);
  }
}
