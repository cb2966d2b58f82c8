// quant::zero_aware: the shared quantizer suite plus its own parameter rules.
#define ECHO_QUANT_POLICY echo::quant::zero_aware
#define ECHO_QUANT_ZERO_EXACT 1
#include "support/quant_suite.hpp"

TEST_CASE_TEMPLATE("zero_aware: the zero point is an integer code; 0 for nonnegative groups, max for nonpositive", Q,
                   ECHO_QUANT_TYPES) {
  ECHO_TEST_RNG(rng);
  constexpr size_t g = Q::group;
  std::vector<float> x = echo_test::activations(rng, 3 * g, g);
  for (size_t i = 0; i < g; ++i) {
    x[i] = std::fabs(x[i]);
    x[g + i] = -std::fabs(x[g + i]);
  }
  x[0] = 1.0f;  // not all zero
  x[g] = -1.0f;
  const coded<Q> c = encode_decode<Q>(x);
  CHECK(c.params(0).offset == 0.0f);
  CHECK(c.params(1).offset == static_cast<float>(Q::max_code));
  for (size_t k = 0; k < c.groups(); ++k) {
    const float z = c.params(k).offset;
    CAPTURE(k);
    CHECK(z == std::nearbyint(z));
    CHECK(z >= 0.0f);
    CHECK(z <= static_cast<float>(Q::max_code));
  }
  failure_counter fails;
  check_error_bound<Q>(x, c, fails);
  CHECK(fails.failures == 0);
}
