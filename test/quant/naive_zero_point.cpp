// quant::naive_zero_point: the shared quantizer suite plus its own parameter rules. Zero is not on
// its grid in general (the ablation's point), so the zero-exactness case does not apply.
#define ECHO_QUANT_POLICY echo::quant::naive_zero_point
#define ECHO_QUANT_ZERO_EXACT 0
#include "support/quant_suite.hpp"

TEST_CASE_TEMPLATE("naive_zero_point: lo is the group minimum rounded down to fp16", Q, ECHO_QUANT_TYPES) {
  ECHO_TEST_RNG(rng);
  const std::vector<float> x = echo_test::activations(rng, 4097, Q::group);
  const coded<Q> c = encode_decode<Q>(x);
  for (size_t k = 0; k < c.groups(); ++k) {
    float lo = INFINITY;
    for (size_t i = k * Q::group; i < std::min(x.size(), (k + 1) * Q::group); ++i) lo = std::fmin(lo, x[i]);
    const uint16_t lo_bits = c.wire_params_of(k).p1;
    CAPTURE(k);
    CHECK(lo_bits == echo::detail::float_to_half_bits(lo, echo::detail::round_mode::down));
    CHECK(c.params(k).offset <= lo);
  }
}

TEST_CASE_TEMPLATE("naive_zero_point: an all-equal group of an fp16 value is exact; zero is not on the grid", Q,
                   ECHO_QUANT_TYPES) {
  ECHO_TEST_RNG(rng);
  const float v = echo::detail::half_bits_to_float(rng.uniform_int<uint16_t>(0, 0x7BFFu)) * (rng.coin() ? 1.0f : -1.0f);
  CAPTURE(v);
  const std::vector<float> same(Q::group, v);
  const coded<Q> c = encode_decode<Q>(same);
  CHECK(c.params(0).scale == 0.0f);
  for (float d : c.decoded) CHECK(d == v);

  // [-1, 0.3] with a zero: the grid starts at -1, and its steps do not meet 0 exactly
  std::vector<float> x(Q::group, 0.0f);
  x[0] = -1.0f;
  x[1] = 0.3f;
  const coded<Q> z = encode_decode<Q>(x);
  const echo::quant::group_params p = z.params(0);
  CAPTURE(p.scale);
  CHECK(std::fabs(z.decoded[2]) <= p.scale / 2);
  CHECK(z.decoded[2] != 0.0f);  // documents the ablation baseline's weakness
}
