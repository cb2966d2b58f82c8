// quant::clipped on the host: the shrunk fit, the error of values inside and beyond the shrunk
// range, the wire size, what error storages a clip allows (comp::holds_errors_of), and the
// reference all-reduce of a clipped quantizer with error feedback (errors kept whole).
#include <echo/echo.cuh>

#include "support/quant.hpp"
#include "support/random.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

namespace quant = echo::quant;
namespace comp = echo::comp;

namespace {
using za4 = quant::zero_aware<4, 128>;
using clip870 = quant::clipped<za4, 870>;
using nzp_clip = quant::clipped<quant::naive_zero_point<4, 64>, 768>;

static_assert(quant::packet<clip870>::bytes(3) == quant::packet<za4>::bytes(3), "a clip keeps the wire size");
static_assert(quant::clip_of<clip870>::ratio_1024 == 870 && quant::clip_of<za4>::ratio_1024 == 1024, "clip_of");
static_assert(quant::clip_of<quant::rotated<clip870>>::ratio_1024 == 870, "a rotation keeps its clip");
static_assert(!comp::holds_errors_of<comp::error_feedback<comp::step8_state>, clip870>::value &&
                  !comp::holds_errors_of<comp::error_feedback<comp::step4_state>, quant::rotated<clip870>>::value,
              "a clip's errors exceed the step states");
static_assert(comp::holds_errors_of<comp::error_feedback<comp::int8_state>, clip870>::value &&
                  comp::holds_errors_of<comp::error_feedback<echo::bfloat16_t>, clip870>::value &&
                  comp::holds_errors_of<comp::error_feedback<comp::step8_state>, za4>::value &&
                  comp::holds_errors_of<comp::none, clip870>::value,
              "int8, element storages and unclipped quantizers are allowed");
}  // namespace

TEST_CASE("clipped: the fit is Q's fit of the range shrunk about zero (a grid with zero) or its middle") {
  const quant::group_stats st{-3.0f, 5.0f, true};
  const auto w = clip870::fit(st), v = za4::fit({-3.0f * 870 / 1024, 5.0f * 870 / 1024, true});
  CHECK(std::memcmp(&w, &v, sizeof w) == 0);
  const auto s = nzp_clip::shrink({1.0f, 9.0f, true});
  CHECK(s.lo == doctest::Approx(5.0 - 4.0 * 768 / 1024));
  CHECK(s.hi == doctest::Approx(5.0 + 4.0 * 768 / 1024));
  const auto bad = clip870::shrink({-1.0f, 1.0f, false});  // not finite: untouched (Q's NaN scale)
  CHECK((bad.lo == -1.0f && bad.hi == 1.0f && !bad.finite));
}

TEST_CASE("clipped: inside the shrunk range a value errs by half a (finer) step; beyond it, clamps to an end code") {
  echo_test::rng r(17);
  double bulk_err = 0, bulk_plain = 0;  // over every trial: finer steps win on the bulk
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> x(128);
    for (auto& v : x) v = r.normal();
    x[static_cast<size_t>(trial) % 128] = 12.0f * (trial % 2 ? 1 : -1);  // an outlier sets the range
    const auto c = echo_test::encode_decode<clip870>(x.data(), x.size());
    const auto plain = echo_test::encode_decode<za4>(x.data(), x.size());
    const auto p = c.params(0);
    float lo = x[0], hi = x[0];
    for (float v : x) lo = std::min(lo, v), hi = std::max(hi, v);
    const float clo = lo * 870 / 1024.0f, chi = hi * 870 / 1024.0f;
    CHECK(p.scale < plain.params(0).scale);  // finer steps
    for (size_t i = 0; i < x.size(); ++i) {
      const float e = std::fabs(c.decoded[i] - x[i]);
      if (x[i] >= clo && x[i] <= chi) {
        CHECK(e <= 0.5f * p.scale * 1.0001f);
        bulk_err += e;
        bulk_plain += std::fabs(plain.decoded[i] - x[i]);
      } else {
        const float end = x[i] > 0 ? chi : clo;  // the end code lies within half a step of the shrunk end
        CHECK(std::fabs(c.decoded[i] - end) <= 0.5f * p.scale * 1.0001f + 1e-6f);
      }
    }
  }
  CHECK(bulk_err < 0.95 * bulk_plain);
}

namespace {
/// The worst |sum of the outputs - sum of the exact sums| over a chain of calls of outlier-laden
/// inputs (rank 0's outputs), and the worst single call's error.
template <class C>
std::pair<double, double> drift(int calls) {
  constexpr int P = 3;
  constexpr size_t n = 1000;
  echo::reference::all_reduce<clip870, C> ar(P);
  echo::reference::chain_state<C> chain(P, n);
  echo_test::rng r(5);
  std::vector<double> exact(n, 0.0), got(n, 0.0);
  std::vector<std::vector<float>> in(P, std::vector<float>(n)), out(P, std::vector<float>(n));
  std::vector<const float*> ip;
  std::vector<float*> op;
  for (int k = 0; k < P; ++k) ip.push_back(in[k].data()), op.push_back(out[k].data());
  double single = 0;
  for (int call = 0; call < calls; ++call) {
    for (int k = 0; k < P; ++k)
      for (size_t i = 0; i < n; ++i) in[k][i] = r.normal() * (i % 97 == 0 ? 30.0f : 1.0f);
    if constexpr (C::keeps_state) ar(ip, op, n, &chain);
    else ar(ip, op, n);
    for (size_t i = 0; i < n; ++i) {
      double s = 0;
      for (int k = 0; k < P; ++k) s += in[k][i];
      exact[i] += s;
      got[i] += out[0][i];
      single = std::max(single, std::fabs(out[0][i] - s));
    }
  }
  double worst = 0;
  for (size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(got[i] - exact[i]));
  return {worst, single};
}
}  // namespace

TEST_CASE("clipped + int8 state: the reference keeps every error, so the chain telescopes") {
  // With the errors kept whole (clamped values' too), the drift of a chain stays one call's error;
  // without feedback it grows with the calls.
  const auto ef = drift<comp::error_feedback<comp::int8_state>>(40);
  const auto none = drift<comp::none>(40);
  CHECK(ef.first <= 1.5 * none.second);
  CHECK(none.first > 2 * ef.first);
}
