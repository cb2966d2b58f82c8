// quant::symmetric: the shared quantizer suite plus its own properties.
#define ECHO_QUANT_POLICY echo::quant::symmetric
#define ECHO_QUANT_ZERO_EXACT 1
#include "support/quant_suite.hpp"

TEST_CASE_TEMPLATE("symmetric: p1 is 0, code 0 is unused, and negating a group negates its decoding", Q,
                   ECHO_QUANT_TYPES) {
  ECHO_TEST_RNG(rng);
  failure_counter fails;
  for (size_t n : echo_test::awkward_sizes()) {
    CAPTURE(n);
    const std::vector<float> x = echo_test::activations(rng, n, Q::group);
    std::vector<float> neg(n);
    for (size_t i = 0; i < n; ++i) neg[i] = -x[i];
    const coded<Q> c = encode_decode<Q>(x), d = encode_decode<Q>(neg);
    for (size_t k = 0; k < c.groups(); ++k) {
      CHECK(c.wire_params_of(k).p1 == 0);
      CHECK(c.params(k).offset == static_cast<float>(1u << (Q::bits - 1)));
      for (size_t i = k * Q::group; i < std::min(n, (k + 1) * Q::group); ++i)
        ECHO_EXPECT(fails, c.code(k, static_cast<int>(i - k * Q::group)) >= 1, "code 0 used at " << i);
    }
    for (size_t i = 0; i < n; ++i)
      ECHO_EXPECT(fails, d.decoded[i] == -c.decoded[i], "x = " << x[i] << ": " << c.decoded[i] << " vs " << d.decoded[i]);
  }
  CHECK(fails.failures == 0);
}
