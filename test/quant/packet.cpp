// quant::packet<Q>: code packing and the wire layout (independent of the policy's arithmetic).
#include "support/check.hpp"
#include "support/quant.hpp"
#include "support/random.hpp"

#include <doctest/doctest.h>

#include <initializer_list>
#include <vector>

using echo::quant::zero_aware;

TEST_CASE_TEMPLATE("put_code / get_code: random codes round trip, and sit at bits [i*b, (i+1)*b)", Q,
                   ECHO_TEST_QUANT_CONFIGS(zero_aware)) {
  using pk = echo::quant::packet<Q>;
  constexpr int b = Q::bits, g = Q::group;
  ECHO_TEST_RNG(rng);
  echo_test::failure_counter fails;
  for (int rep = 0; rep < 200; ++rep) {
    std::vector<uint32_t> codes(g);
    for (auto& q : codes) q = rng.uniform_int<uint32_t>(0, Q::max_code);
    if (rep == 0) std::fill(codes.begin(), codes.end(), Q::max_code);  // all ones: no bit may leak
    std::vector<uint32_t> words(pk::code_words + 1, 0);  // one guard word
    for (int i = 0; i < g; ++i) pk::put_code(words.data(), i, codes[i]);
    ECHO_EXPECT(fails, words[pk::code_words] == 0, "put_code wrote past the group's words");
    // the independent bit-string view of the layout: little-endian words, value i at bit i*b
    std::vector<uint32_t> expect(pk::code_words, 0);
    for (int i = 0; i < g; ++i)
      for (int j = 0; j < b; ++j)
        if ((codes[i] >> j) & 1u) expect[(i * b + j) / 32] |= 1u << ((i * b + j) % 32);
    for (size_t w = 0; w < pk::code_words; ++w) ECHO_EXPECT(fails, words[w] == expect[w], "word " << w);
    for (int i = 0; i < g; ++i)
      ECHO_EXPECT(fails, pk::get_code(words.data(), i) == echo::detail::biased(codes[i]),
                  "code " << i << ": put " << codes[i] << ", got " << echo::detail::unbiased(pk::get_code(words.data(), i)));
  }
  CHECK(fails.failures == 0);
}

TEST_CASE_TEMPLATE("packet layout: sizes, offsets and the 16-byte alignment packet.cuh promises", Q,
                   ECHO_TEST_QUANT_CONFIGS(zero_aware)) {
  using pk = echo::quant::packet<Q>;
  constexpr int b = Q::bits, g = Q::group;
  static_assert(pk::code_bytes == static_cast<size_t>(g) * b / 8, "codes: g * b bits");
  static_assert(pk::code_bytes % 4 == 0, "a group's codes are whole 32-bit words");
  static_assert(Q::param_bytes == 4 && sizeof(echo::quant::wire_params) == 4, "two fp16 parameters a group");
  CHECK(Q::wire_bits_per_value == doctest::Approx(b + 32.0 / g));
  // the same layout for every policy with these bits and group
  static_assert(echo::quant::packet<echo::quant::symmetric<b, g>>::bytes(7) == pk::bytes(7), "");
  static_assert(echo::quant::packet<echo::quant::naive_zero_point<b, g>>::bytes(7) == pk::bytes(7), "");

  // "For b in {4, 8} and any g, and b = 2 with g >= 64, every group's codes start on a 16-byte boundary"
  const bool promised = b == 4 || b == 8 || (b == 2 && g >= 64);
  if (promised) CHECK(pk::code_bytes % 16 == 0);
  for (size_t groups : {size_t(1), size_t(2), size_t(3), size_t(7), size_t(33), size_t(1000)}) {
    CAPTURE(groups);
    CHECK(pk::groups_for(groups * g) == groups);
    CHECK(pk::groups_for(groups * g - 1) == groups);
    CHECK(pk::groups_for(groups * g + 1) == groups + 1);
    CHECK(pk::codes_region(groups) % 16 == 0);
    CHECK(pk::codes_region(groups) >= groups * pk::code_bytes);
    CHECK(pk::codes_region(groups) < groups * pk::code_bytes + 16);
    CHECK(pk::bytes(groups) % 16 == 0);
    CHECK(pk::bytes(groups) == pk::codes_region(groups) + ((groups * 4 + 15) / 16) * 16);
    CHECK(pk::param_offset(groups, 0) % 16 == 0);
    for (size_t k = 0; k < groups; ++k) {
      REQUIRE(pk::code_offset(k) == k * pk::code_bytes);
      REQUIRE(pk::param_offset(groups, k) == pk::codes_region(groups) + 4 * k);
      if (promised) REQUIRE(pk::code_offset(k) % 16 == 0);
      REQUIRE(pk::code_offset(k) % 4 == 0);
    }
  }
  CHECK(pk::groups_for(0) == 0);
  CHECK(pk::bytes(0) == 0);
}

TEST_CASE("packet: encode writes exactly bytes(groups) bytes, wire parameters are p0 then p1") {
  using Q = zero_aware<4, 32>;
  using pk = echo::quant::packet<Q>;
  ECHO_TEST_RNG(rng);
  for (size_t n : echo_test::awkward_sizes()) {
    CAPTURE(n);
    const std::vector<float> x = echo_test::activations(rng, n, 32);
    const size_t groups = pk::groups_for(n), bytes = pk::bytes(groups);
    std::vector<unsigned char> buf(bytes + 64, 0xEE);
    pk::encode(x.data(), n, buf.data());
    for (size_t b = bytes; b < buf.size(); ++b) REQUIRE(buf[b] == 0xEE);
    for (size_t k = 0; k < groups; ++k) {
      echo::quant::group_stats st = echo::quant::group_stats::empty();
      for (size_t i = k * 32; i < std::min(n, k * 32 + 32); ++i) st.add(x[i]);
      const echo::quant::wire_params w = Q::fit(st);
      const unsigned char* p = buf.data() + pk::param_offset(groups, k);
      CHECK(static_cast<uint16_t>(p[0] | (p[1] << 8)) == w.p0);  // little-endian fp16 bits
      CHECK(static_cast<uint16_t>(p[2] | (p[3] << 8)) == w.p1);
    }
  }
}
