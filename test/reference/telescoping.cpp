// Error feedback telescopes: a residual stream h += all_reduce(partials_k) over K calls keeps one
// call's error with error_feedback, while without compensation the errors pile up.
#include <echo/echo.cuh>

#include "support/bits.hpp"
#include "support/random.hpp"
#include "support/reference.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

using echo::bfloat16_t;
using echo::half_t;
namespace quant = echo::quant;
namespace comp = echo::comp;

namespace {

constexpr int K = 64;

/// RMS error of the stream after each of K calls (index k: after call k + 1). The stream is
/// accumulated in fp64 from the outputs of rank 0, the exact stream in fp64 from the inputs, so
/// that only the all-reduce's own error is measured.
template <class Q, class Comp, class T>
std::vector<double> stream_error(echo_test::rng& rng, int P, size_t n) {
  echo::reference::all_reduce<Q, Comp> ar(P);
  echo::reference::chain_state<Comp> ch(P, n);
  std::vector<double> err(K);
  std::vector<double> h(n, 0.0), exact(n, 0.0);
  echo_test::ranks_data<T> d(P, n);
  auto out = d.out_ptrs();
  for (int k = 0; k < K; ++k) {
    d.randomize(rng, 128, -1.0f, 0.0f);  // partials of magnitude ~0.1..1, fresh each call
    ar(d.in_ptrs(), out, n, Comp::keeps_state ? &ch : nullptr);
    REQUIRE(d.outputs_identical());
    double sq = 0.0;
    for (size_t e = 0; e < n; ++e) {
      for (int r = 0; r < P; ++r) exact[e] += echo_test::widen(d.in[r][e]);
      h[e] += echo_test::widen(d.out[0][e]);
      sq += (h[e] - exact[e]) * (h[e] - exact[e]);
    }
    err[k] = std::sqrt(sq / static_cast<double>(n));
  }
  return err;
}

template <class Q, class T, class Storage>
void check_telescoping(echo_test::rng& rng, int P, size_t n) {
  INFO("quantizer " << std::string(Q::name) << " b=" << Q::bits << " g=" << Q::group << ", T = " << echo_test::type_name<T>()
                    << ", state " << echo_test::type_name<Storage>() << ", P = " << P << ", n = " << n);
  const std::vector<double> none = stream_error<Q, comp::none, T>(rng, P, n);
  const std::vector<double> ef = stream_error<Q, comp::error_feedback<Storage>, T>(rng, P, n);
  const double ef_early = std::max(ef[0], ef[1]);
  MESSAGE(std::string(Q::name) << "<" << Q::bits << "," << Q::group << "> " << echo_test::type_name<T>() << " state "
                  << echo_test::type_name<Storage>() << " P=" << P << ": none " << none[0] << " -> " << none[K - 1]
                  << " (x" << none[K - 1] / none[0] << "), error_feedback " << ef[0] << " -> " << ef[K - 1] << " (x"
                  << ef[K - 1] / ef_early << ")");
  // Without compensation the K calls' independent errors add up (about sqrt(K) = 8x here).
  CHECK(none[K - 1] >= 2.0 * none[0]);
  // With error feedback the stream keeps one call's error: it stays within 2x of the first calls'.
  CHECK(ef[K - 1] <= 2.0 * ef_early);
  for (int k = 0; k < K; ++k) CHECK(ef[k] <= 2.0 * ef_early);
  CHECK(ef[K - 1] < none[K - 1]);
}

}  // namespace

TEST_CASE("error_feedback telescopes, none accumulates (4-bit, g = 128)") {
  ECHO_TEST_RNG(rng);
  for (int P : {2, 4, 8}) {
    CAPTURE(P);
    const size_t n = 4097;
    check_telescoping<quant::zero_aware<4, 128>, float, float>(rng, P, n);
    check_telescoping<quant::zero_aware<4, 128>, bfloat16_t, float>(rng, P, n);
    check_telescoping<quant::naive_zero_point<4, 128>, bfloat16_t, float>(rng, P, n);
    check_telescoping<quant::symmetric<4, 128>, half_t, float>(rng, P, n);
  }
}

TEST_CASE("error_feedback with 16-bit state telescopes too") {
  ECHO_TEST_RNG(rng);
  check_telescoping<quant::zero_aware<4, 128>, bfloat16_t, bfloat16_t>(rng, 4, 4097);
  check_telescoping<quant::zero_aware<4, 128>, bfloat16_t, half_t>(rng, 4, 4097);
}

TEST_CASE("error_feedback telescopes at 2 and 8 bits") {
  ECHO_TEST_RNG(rng);
  check_telescoping<quant::zero_aware<2, 32>, float, float>(rng, 4, 1000);
  check_telescoping<quant::zero_aware<8, 256>, float, float>(rng, 4, 1000);
}
