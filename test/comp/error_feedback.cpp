// comp::error_feedback storage types and how the stored errors are rounded.
#include <echo/echo.cuh>

#include "support/bits.hpp"
#include "support/check.hpp"
#include "support/random.hpp"
#include "support/reference.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <type_traits>

using echo::bfloat16_t;
using echo::half_t;
namespace comp = echo::comp;

static_assert(comp::error_feedback<>::enabled, "");
static_assert(std::is_same<comp::error_feedback<>::storage, float>::value, "fp32 storage by default");
static_assert(std::is_same<comp::error_feedback<bfloat16_t>::storage, bfloat16_t>::value, "");
static_assert(std::is_same<comp::error_feedback<half_t>::storage, half_t>::value, "");
static_assert(!comp::none::enabled, "");
// error_feedback<double> or <int> is rejected by a static_assert (not testable at run time).

TEST_CASE_TEMPLATE("error_feedback<Storage>: chain_state stores errors rounded to nearest even", S, float, bfloat16_t,
                   half_t) {
  using chain = echo::reference::chain_state<comp::error_feedback<S>>;
  ECHO_TEST_RNG(rng);
  echo_test::failure_counter fails;
  const int P = 3;
  const size_t n = 4097;
  chain ch(P, n);
  ch.begin_call(n);
  std::vector<float> e(static_cast<size_t>(P) * n);
  for (size_t k = 0; k < e.size(); ++k) {
    const double u = rng.uniform(0.0f, 1.0f);
    e[k] = u < 0.1 ? rng.normal(0.0f, 1e-6f) : u < 0.2 ? rng.normal(0.0f, 1e4f) : rng.normal(0.0f, 0.1f);
  }
  for (int r = 0; r < P; ++r)
    for (size_t k = 0; k < n; ++k) ch.set_error(r, k, e[r * n + k]);
  for (int r = 0; r < P; ++r)
    for (size_t k = 0; k < n; ++k) {
      const float want = echo_test::widen(echo_test::narrow<S>(e[r * n + k]));
      if (std::is_same<S, float>::value) REQUIRE(want == e[r * n + k]);
      ECHO_EXPECT(fails, echo_test::same_bits(ch.error(r, k), want),
                  "stored " << e[r * n + k] << ", read back " << ch.error(r, k) << ", expected " << want);
    }
  CHECK(fails.failures == 0);
}

TEST_CASE_TEMPLATE("error_feedback<Storage>: after one call the stored errors are the fp32 errors rounded", S,
                   bfloat16_t, half_t) {
  using Q = echo::quant::zero_aware<4, 128>;
  ECHO_TEST_RNG(rng);
  echo_test::failure_counter fails;
  for (int P : {2, 5}) {
    const size_t n = rng.uniform_int<size_t>(1, 3000);
    CAPTURE(P);
    CAPTURE(n);
    echo_test::ranks_data<bfloat16_t> d(P, n);
    d.randomize(rng);
    echo::reference::all_reduce<Q, comp::error_feedback<float>> exact(P);
    echo::reference::all_reduce<Q, comp::error_feedback<S>> narrow(P);
    echo::reference::chain_state<comp::error_feedback<float>> ce(P, n);
    echo::reference::chain_state<comp::error_feedback<S>> cn(P, n);
    auto o1 = d.out_ptrs();
    exact(d.in_ptrs(), o1, n, &ce);
    const auto first = d.out;
    narrow(d.in_ptrs(), o1, n, &cn);
    CHECK(echo_test::same_bytes(first[0], d.out[0]));  // the state only matters from the next call on
    size_t nonzero = 0;
    for (int r = 0; r < P; ++r)
      for (size_t k = 0; k < n; ++k) {
        nonzero += ce.error(r, k) != 0.0f;
        const float want = echo_test::widen(echo_test::narrow<S>(ce.error(r, k)));
        ECHO_EXPECT(fails, echo_test::same_bits(cn.error(r, k), want),
                    "rank " << r << " element " << k << ": fp32 error " << ce.error(r, k) << ", stored " << cn.error(r, k));
      }
    CHECK(nonzero > 0);
  }
  CHECK(fails.failures == 0);
}
