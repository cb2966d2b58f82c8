// comp::error_feedback storage types and how the stored errors are rounded.
#include <echo/echo.cuh>

#include "support/bits.hpp"
#include "support/check.hpp"
#include "support/random.hpp"
#include "support/reference.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <type_traits>

using echo::bfloat16_t;
using echo::half_t;
namespace comp = echo::comp;

static_assert(comp::error_feedback<>::keeps_state, "");
static_assert(std::is_same<comp::error_feedback<>::storage, comp::step8_state>::value, "step8 by default (docs/benchmarks.md)");
static_assert(std::is_same<comp::error_feedback<bfloat16_t>::storage, bfloat16_t>::value, "");
static_assert(std::is_same<comp::error_feedback<half_t>::storage, half_t>::value, "");
static_assert(!comp::none::keeps_state, "");
// error_feedback<double> or <int> is rejected by a static_assert (not testable at run time).

TEST_CASE("error_feedback::keep: every finite error unchanged, bit for bit (the pipeline skips it for finite groups); NaN and Inf to 0") {
  using ef = comp::error_feedback<>;
  ECHO_TEST_RNG(r);
  const float edges[] = {0.0f, -0.0f, 1e-45f, -1e-45f, 1.17549435e-38f, 3.4028235e38f, -3.4028235e38f, 1.0f, -65504.0f};
  for (float e : edges) CHECK(echo_test::bits_of(ef::keep(e)) == echo_test::bits_of(e));
  for (int i = 0; i < 100000; ++i) {
    const float e = echo_test::float_of(r.bits32());
    if (std::isfinite(e)) REQUIRE(echo_test::bits_of(ef::keep(e)) == echo_test::bits_of(e));
    else REQUIRE(echo_test::bits_of(ef::keep(e)) == 0u);
  }
  CHECK(echo_test::bits_of(ef::keep(INFINITY)) == 0u);
  CHECK(echo_test::bits_of(ef::keep(-INFINITY)) == 0u);
  CHECK(echo_test::bits_of(ef::keep(NAN)) == 0u);
}

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
  for (int r = 0; r < P; ++r) ch.set_errors(r, std::vector<float>(e.begin() + r * n, e.begin() + (r + 1) * n), n);
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

TEST_CASE_TEMPLATE("int8_state / int4_state: the error as codes of a symmetric grid per 32 values", S, comp::int8_state,
                   comp::int4_state) {
  using chain = echo::reference::chain_state<comp::error_feedback<S>>;
  using grid = echo::quant::symmetric<S::bits, 32>;
  ECHO_TEST_RNG(rng);
  echo_test::failure_counter fails;
  for (size_t n : {size_t(1), size_t(31), size_t(33), size_t(4097)}) {
    CAPTURE(n);
    chain ch(1, n);
    ch.begin_call(n);
    std::vector<float> e(n);
    for (size_t k = 0; k < n; ++k) e[k] = (k / 32) % 5 == 0 ? 0.0f : rng.normal(0.0f, rng.log_uniform(-6.0f, 2.0f));
    ch.set_errors(0, e, n);
    for (size_t b = 0; b < n; b += 32) {
      double m = 0.0;
      for (size_t k = b; k < std::min(n, b + 32); ++k) m = std::max(m, std::fabs(static_cast<double>(e[k])));
      // the group's step: max |e| / (2^(b-1) - 1) rounded up to fp16: within 2^-10 of it for a
      // normal fp16, the next multiple of 2^-24 below 2^-14 (subnormal; a group of errors near
      // 1e-5 lands there)
      const double raw = m / ((1 << (S::bits - 1)) - 1);
      const double step = raw < std::ldexp(1.0, -14)
                              ? std::max(std::ceil(raw / std::ldexp(1.0, -24)), 1.0) * std::ldexp(1.0, -24)
                              : raw * (1.0 + std::ldexp(1.0, -10));
      for (size_t k = b; k < std::min(n, b + 32); ++k) {
        const double got = ch.error(0, k);
        // half a step of the group's own grid (0.1 % for the fp32 reciprocal and products)
        ECHO_EXPECT(fails, std::fabs(got - e[k]) <= 0.5 * step * 1.001 + 1e-30,
                    "k " << k << ": error " << e[k] << " stored as " << got << " (group max " << m << ")");
        if (e[k] == 0.0f) ECHO_EXPECT(fails, got == 0.0, "a zero error must read back as 0, got " << got);
      }
    }
  }
  CHECK(fails.failures == 0);
  static_assert(grid::max_code == (1u << S::bits) - 1, "");
  // bytes: codes, then a 2-byte step per 32 values
  CHECK(comp::state_storage<S>::bytes(4096) == 4096 * S::bits / 8 + 4096 / 32 * 2);
}

TEST_CASE_TEMPLATE("step8_state / step4_state: the error in units of its data group's step", S, comp::step8_state,
                   comp::step4_state) {
  using chain = echo::reference::chain_state<comp::error_feedback<S>>;
  static_assert(chain::stores_in_data_steps, "");
  const double units = 1 << (S::bits - 1), top = (1 << (S::bits - 1)) - 1, bottom = -(1 << (S::bits - 1));
  ECHO_TEST_RNG(rng);
  echo_test::failure_counter fails;
  for (size_t n : {size_t(1), size_t(31), size_t(33), size_t(4097)}) {
    CAPTURE(n);
    chain ch(1, n);
    ch.begin_call(n);
    // per 32 values the parameters of a data group: a random fp16 step, some 0, some non-finite
    std::vector<echo::quant::group_params> steps((n + 31) / 32);
    std::vector<float> e(n);
    for (size_t b = 0; b < steps.size(); ++b) {
      const float raw = rng.log_uniform(-9.0f, 3.0f);
      const int kind = static_cast<int>(rng.uniform_int<size_t>(0, 9));
      const echo::quant::wire_params w = kind == 0   ? echo::quant::wire_params{0, 0}
                                         : kind == 1 ? echo::quant::detail::non_finite_params
                                                     : echo::quant::wire_params{echo::quant::detail::scale_bits(raw), 0};
      steps[b] = echo::quant::zero_aware<4, 32>::unpack(w);
      for (size_t k = b * 32; k < std::min(n, b * 32 + 32); ++k) {
        // mostly within a step (what a quantized call injects), some beyond (saturating)
        const double s = steps[b].finite ? steps[b].scale : 1.0;
        e[k] = kind == 1 ? 0.0f  // a non-finite group's errors were kept as 0
                         : static_cast<float>(rng.uniform(-1.0f, 1.0f) * (rng.uniform(0.0f, 1.0f) < 0.9 ? 1.0 : 4.0) *
                                              (s > 0 ? s : 1e-3));
        if (kind == 0) e[k] = 0.0f;  // an all-zero data group injects no error
      }
    }
    ch.set_errors(0, e, n, steps.data());
    for (size_t k = 0; k < n; ++k) {
      const auto& p = steps[k / 32];
      const double s = p.finite ? p.scale : 0.0;
      // independent of the storage's arithmetic: e / s * units rounded to an integer and clamped
      // (either neighbour within 1e-4 of a tie: the device multiplies by a rounded 1 / s)
      const double t = s > 0 ? static_cast<double>(e[k]) / s * units : 0.0;
      auto clamp = [&](double q) { return std::min(top, std::max(bottom, q)); };
      const double got = ch.error(0, k);
      const bool tie = std::fabs(t - std::floor(t) - 0.5) < 1e-4;
      const bool ok = got == clamp(std::nearbyint(t)) * s / units ||
                      (tie && (got == clamp(std::floor(t)) * s / units || got == clamp(std::ceil(t)) * s / units));
      ECHO_EXPECT(fails, ok,
                  "k " << k << ": error " << e[k] << " with step " << s << " read back as " << got << ", expected "
                       << clamp(std::nearbyint(t)) * s / units);
    }
    // a call that does not quantize fits a step to its own errors (per 32), like int_state
    ch.set_errors(0, e, n);
    for (size_t b = 0; b < n; b += 32) {
      double m = 0.0;
      for (size_t k = b; k < std::min(n, b + 32); ++k) m = std::max(m, std::fabs(static_cast<double>(e[k])));
      for (size_t k = b; k < std::min(n, b + 32); ++k)
        ECHO_EXPECT(fails, std::fabs(ch.error(0, k) - e[k]) <= 0.5 * m / top * 1.002 + std::ldexp(1.0, -24) / units,
                    "own step, k " << k << ": error " << e[k] << " read back as " << ch.error(0, k));
    }
  }
  CHECK(fails.failures == 0);
  CHECK(comp::state_storage<S>::bytes(4096) == 4096 * S::bits / 8 + 4096 / 32 * 2);
}

/// One reference call of quantizer Q on fresh random bf16 inputs of P ranks and n values, its
/// errors kept exactly (ce) and as step8 codes (cs).
template <class Q>
struct step8_call {
  echo_test::ranks_data<bfloat16_t> d;
  echo::reference::chain_state<comp::error_feedback<float>> ce;
  echo::reference::chain_state<comp::error_feedback<comp::step8_state>> cs;
  bool same_output = false;  // the state only matters from the next call on
  step8_call(int P, size_t n, echo_test::rng& rng) : d(P, n), ce(P, n), cs(P, n) {
    d.randomize(rng);
    auto o = d.out_ptrs();
    echo::reference::all_reduce<Q, comp::error_feedback<float>>{P}(d.in_ptrs(), o, n, &ce);
    const auto first = d.out;
    echo::reference::all_reduce<Q, comp::error_feedback<comp::step8_state>>{P}(d.in_ptrs(), o, n, &cs);
    same_output = echo_test::same_bytes(first[0], d.out[0]);
  }
};

/// f(call, P, n) for a call at P = 2 and at P = 3, each of a random n.
template <class Q, class F>
void for_step8_calls(F&& f) {
  ECHO_TEST_RNG(rng);
  for (int P : {2, 3}) {
    const size_t n = rng.uniform_int<size_t>(1, 5000);
    CAPTURE(P);
    CAPTURE(n);
    const step8_call<Q> c(P, n, rng);
    CHECK(c.same_output);
    f(c, P, n);
  }
}

TEST_CASE_TEMPLATE("step8_state: a reference call stores each error to 1/256 of its data group's step", Q,
                   echo::quant::zero_aware<4, 128>, echo::quant::symmetric<8, 32>, echo::quant::zero_aware<3, 64>) {
  echo_test::failure_counter fails;
  for_step8_calls<Q>([&](const step8_call<Q>& c, int P, size_t n) {
    const auto& d = c.d;
    const auto& ce = c.ce;
    const auto& cs = c.cs;
    // The data groups' steps, recomputed here: senders quantize their input, owners the sum of
    // their own input and the receipts in rank order.
    const echo::detail::partition part{n, static_cast<size_t>(Q::group), P};
    std::vector<std::vector<float>> x(P, std::vector<float>(n));
    for (int r = 0; r < P; ++r)
      for (size_t k = 0; k < n; ++k) x[r][k] = echo_test::widen(d.in[r][k]);
    auto params_of = [](const float* v, size_t len) {
      echo::quant::group_stats st = echo::quant::group_stats::empty();
      for (size_t i = 0; i < len; ++i) st.add(v[i]);
      return Q::unpack(Q::fit(st));
    };
    size_t clamped = 0, checked = 0;
    for (int j = 0; j < P; ++j) {
      const size_t b = part.begin(j), len = part.size(j);
      std::vector<float> S(len, 0.0f);
      for (int i = 0; i < P; ++i) {
        const auto rt = echo::reference::round_trip<Q, bfloat16_t>(&x[i][b], len);
        for (size_t k = 0; k < len; ++k) S[k] = i == 0 ? (i == j ? x[i][b + k] : rt[k]) : S[k] + (i == j ? x[i][b + k] : rt[k]);
      }
      for (size_t g = 0; g < len; g += Q::group) {
        const size_t gl = std::min<size_t>(Q::group, len - g);
        const auto own = params_of(&S[g], gl);
        for (int r = 0; r < P; ++r) {
          const auto p = r == j ? own : params_of(&x[r][b + g], gl);
          const double s = p.scale, inv128 = static_cast<double>(p.inv) * 128;
          for (size_t k = b + g; k < b + g + gl; ++k) {
            // exactly: the code is e * (1 / s rounded to fp32) * 128 rounded to nearest even (the
            // product of two floats is exact in double), clamped to [-128, 127], times s / 128
            const double e = ce.error(r, k), got = cs.error(r, k);
            const double q = std::nearbyint(e * inv128), qc = std::min(127.0, std::max(-128.0, q));
            clamped += q != qc;
            ++checked;
            ECHO_EXPECT(fails, got == qc * s / 128,
                        "rank " << r << " element " << k << ": error " << e << ", stored " << got << ", expected "
                                << qc * s / 128 << ", step " << s);
            if (q == qc)  // unclamped: within half a unit of step / 128
              ECHO_EXPECT(fails, std::fabs(got - e) <= s / 256 * 1.0001, "rank " << r << " element " << k);
          }
        }
      }
    }
    CHECK(checked == static_cast<size_t>(P) * n);
    CHECK(clamped * 100 <= checked);  // these grids clamp rarely if ever (za8's off-centre top values)
  });
  CHECK(fails.failures == 0);
}

TEST_CASE("step8_state with a grid without zero (naive_zero_point): the step of the errors' own range") {
  using Q = echo::quant::naive_zero_point<4, 64>;
  static_assert(!Q::holds_zero, "");
  echo_test::failure_counter fails;
  for_step8_calls<Q>([&](const step8_call<Q>& c, int P, size_t n) {
    const auto& ce = c.ce;
    const auto& cs = c.cs;
    for (int r = 0; r < P; ++r)
      for (size_t b = 0; b < n; b += 32) {
        double m = 0.0;
        for (size_t k = b; k < std::min(n, b + 32); ++k) m = std::max(m, std::fabs(static_cast<double>(ce.error(r, k))));
        for (size_t k = b; k < std::min(n, b + 32); ++k)  // half a unit of m / 127 (fp16 step rounded up)
          ECHO_EXPECT(fails, std::fabs(static_cast<double>(cs.error(r, k)) - ce.error(r, k)) <= 0.5 * m / 127 * 1.002,
                      "rank " << r << " element " << k << ": error " << ce.error(r, k) << " stored " << cs.error(r, k));
      }
  });
  CHECK(fails.failures == 0);
}

TEST_CASE("a call that starts a chain adds nothing to its input: -0 stays -0, as on the device") {
  using C = comp::error_feedback<bfloat16_t>;
  const int P = 2;
  const size_t n = 300;
  std::vector<std::vector<bfloat16_t>> in(P, std::vector<bfloat16_t>(n, echo_test::narrow<bfloat16_t>(0.5f)));
  for (int r = 0; r < P; ++r)
    for (size_t k = 0; k < n; k += 3) in[r][k] = echo_test::narrow<bfloat16_t>(-0.0f);
  std::vector<std::vector<bfloat16_t>> out(P, std::vector<bfloat16_t>(n));
  std::vector<const bfloat16_t*> ip{in[0].data(), in[1].data()};
  std::vector<bfloat16_t*> op{out[0].data(), out[1].data()};
  echo::reference::all_reduce<echo::quant::none, C> ar(P);
  echo::reference::chain_state<C> ch(P, n);
  CHECK(!ch.continues());
  ar(ip, op, n, &ch);
  CHECK(ch.continues());
  for (size_t k = 0; k < n; k += 3) REQUIRE(std::signbit(echo_test::widen(out[0][k])));  // -0 + -0 = -0
  ar(ip, op, n, &ch);  // continues: x' = -0 + (stored +0) = +0
  for (size_t k = 0; k < n; k += 3) REQUIRE(!std::signbit(echo_test::widen(out[0][k])));
  ch.reset();
  CHECK(!ch.continues());
  ar(ip, op, n, &ch);
  for (size_t k = 0; k < n; k += 3) REQUIRE(std::signbit(echo_test::widen(out[0][k])));
}

/// Whether a group whose statistics lo / hi land on Q's grid (tile_codec::on_grid's test).
template <class Q>
bool lands_on_grid(float lo, float hi, const echo::quant::group_params& p) {
  return p.finite && Q::position(lo, p) >= echo::detail::code_magic &&
         Q::position(hi, p) <= echo::detail::code_magic + static_cast<float>(Q::max_code);
}

TEST_CASE_TEMPLATE("step8_state / step4_state: a group quantized without clamping makes errors their codes hold unclamped (the device skips the clamp)",
                   Q, echo::quant::zero_aware<2, 32>, echo::quant::zero_aware<3, 64>, echo::quant::zero_aware<4, 128>,
                   echo::quant::symmetric<4, 32>, echo::quant::zero_aware<6, 64>, echo::quant::symmetric<6, 32>,
                   echo::quant::zero_aware<8, 128>, echo::quant::symmetric<8, 32>) {
  // tile_stages::keep_errors' in_range: push's errors x - D(Q(x)) of such a group, at any bits;
  // reduce's S - T(D(Q(S))) for T = float at any bits, for bf16 up to 6 bits (|D| <= max_code
  // steps, rounded by at most 2^-8 of it). step8's codes hold +-127 units of step / 128, step4's
  // +-7 of step / 8.
  using s8 = comp::state_storage<comp::step8_state>;
  using s4 = comp::state_storage<comp::step4_state>;
  ECHO_TEST_RNG(rng);
  echo_test::failure_counter fails;
  size_t on_grid = 0, groups = 0;
  double widest = 0.0;  // the largest |error| seen, in steps
  std::vector<float> x(Q::group);
  for (int g = 0; g < 20000; ++g) {
    const float scale = rng.log_uniform(-12.0f, 12.0f);
    const float mean = rng.coin(0.5) ? rng.normal(0.0f, scale * (rng.coin(0.5) ? 1.0f : 30.0f)) : 0.0f;
    for (auto& v : x) v = mean + rng.normal(0.0f, scale);
    if (rng.coin(0.2)) x[0] = -x[0] * 4.0f;  // a lone outlier
    echo::quant::group_stats st = echo::quant::group_stats::empty();
    for (float v : x) st.add(v);
    const auto p = Q::unpack(Q::fit(st));
    ++groups;
    if (!lands_on_grid<Q>(st.lo, st.hi, p)) continue;
    ++on_grid;
    const auto p8 = s8::grid_of(p), p4 = s4::grid_of(p);
    auto check = [&](float e, const char* what) {
      if (p.scale > 0) widest = std::max(widest, std::fabs(static_cast<double>(e)) / p.scale);
      const float t8 = s8::grid::position(e, p8), t4 = s4::grid::position(e, p4);
      ECHO_EXPECT(fails, echo_test::bits_of(t8) == s8::grid::encode(e, p8) && echo_test::bits_of(t4) == s4::grid::encode(e, p4),
                  std::string(what) << ": error " << e << " at step " << p.scale << " clamps (positions " << t8 << ", "
                                    << t4 << ")");
    };
    for (float v : x) {
      const float d = Q::decode(Q::encode(v, p), p);
      check(echo::detail::sub_rn(v, d), "push, or reduce into float");  // float rounds nothing
      using bf = echo::element_traits<bfloat16_t>;
      if (Q::bits <= 6) check(echo::detail::sub_rn(v, bf::to_float(bf::from_float(d))), "reduce into bf16");
    }
  }
  CAPTURE(on_grid);
  CHECK(on_grid * 2 > groups);  // most groups land on the grid
  CHECK(widest <= 0.75);        // the bound keep_errors' comment gives
  CHECK(fails.failures == 0);
}

TEST_CASE_TEMPLATE("step8_state / step4_state: the on-grid errors' bound at the edges of the end codes, over fp16 steps", Q,
                   echo::quant::zero_aware<4, 128>, echo::quant::zero_aware<6, 64>, echo::quant::symmetric<6, 32>) {
  // The largest errors come from the end codes (|D| largest, so bf16 rounds most) and a value at
  // the edge of its code's cell (half a step off). For every third fp16 step (subnormal to
  // 65504), zero points at both ends, the end codes, both edges of each cell: the value farthest
  // from the code's centre that still encodes to it, and its errors into float and bf16.
  using s8 = comp::state_storage<comp::step8_state>;
  using s4 = comp::state_storage<comp::step4_state>;
  using bf = echo::element_traits<bfloat16_t>;
  constexpr int top = static_cast<int>(Q::max_code);
  echo_test::failure_counter fails;
  double widest = 0.0;
  size_t checked = 0;
  for (uint32_t h = 0; h < 0x7C00u; h += 3) {
    const float zs[] = {0.0f, static_cast<float>(top)};
    for (float zf : zs) {
      const auto w = std::is_same<Q, echo::quant::symmetric<Q::bits, Q::group>>::value
                         ? echo::quant::wire_params{static_cast<uint16_t>(h), 0}
                         : echo::quant::wire_params{static_cast<uint16_t>(h), echo::detail::float_to_half_bits(zf)};
      const auto p = Q::unpack(w);
      const double z = static_cast<double>(p.bias) - echo::detail::code_magic;
      for (int q : {0, 1, top - 1, top}) {
        for (int side : {-1, 1}) {
          const uint32_t code = echo::detail::biased(static_cast<uint32_t>(q));
          float x = static_cast<float>((q - z + 0.5 * side) * p.scale), toward = side > 0 ? -INFINITY : INFINITY;
          int steps = 0;
          while (Q::encode(x, p) != code && ++steps < 64) x = std::nextafter(x, toward);  // into the cell
          if (Q::encode(x, p) != code) continue;  // a step so small the cell holds no float near there
          for (float y = std::nextafter(x, -toward); Q::encode(y, p) == code && std::isfinite(y) && ++steps < 128;
               y = std::nextafter(y, -toward))
            x = y;  // out to the cell's edge
          const float t = Q::position(x, p);
          if (!(t >= echo::detail::code_magic && t <= echo::detail::code_magic + static_cast<float>(top))) continue;
          const float d = Q::decode(Q::encode(x, p), p);
          const float es[] = {echo::detail::sub_rn(x, d), echo::detail::sub_rn(x, bf::to_float(bf::from_float(d)))};
          for (float e : es) {
            ++checked;
            if (p.scale > 0) widest = std::max(widest, std::fabs(static_cast<double>(e)) / p.scale);
            const auto p8 = s8::grid_of(p), p4 = s4::grid_of(p);
            ECHO_EXPECT(fails,
                        echo_test::bits_of(s8::grid::position(e, p8)) == s8::grid::encode(e, p8) &&
                            echo_test::bits_of(s4::grid::position(e, p4)) == s4::grid::encode(e, p4),
                        "step bits " << h << ", zero point " << z << ", code " << q << ": x " << x << ", error " << e
                                     << " clamps");
          }
        }
      }
    }
  }
  CAPTURE(checked);
  CHECK(checked > 50000);
  CHECK(widest <= 0.75);
  CHECK(fails.failures == 0);
}

namespace {
// What comp/traits.cuh must refuse: a stateful compensator without keep(), one whose storage is no
// state storage, and a stateless one without state_bytes().
struct no_keep {
  static constexpr const char* name = "no_keep";
  static constexpr bool keeps_state = true;
  using storage = echo::comp::step8_state;
  static size_t state_bytes(size_t n) { return n; }
};
struct with_keep : no_keep {
  static float keep(float e) { return e; }
};
struct odd_storage : with_keep {
  using storage = int;
};
struct no_bytes {
  static constexpr const char* name = "no_bytes";
  static constexpr bool keeps_state = false;
};
}  // namespace

TEST_CASE("the compensator contract as a trait: every shipped compensator meets it, a broken one does not") {
  namespace comp = echo::comp;
  static_assert(comp::is_compensator<comp::none>::value && comp::is_compensator<comp::error_feedback<>>::value &&
                    comp::is_compensator<comp::error_feedback<comp::int4_state>>::value &&
                    comp::is_compensator<comp::error_feedback<float>>::value &&
                    comp::is_compensator<comp::error_feedback<echo::half_t>>::value,
                "the compensators");
  CHECK(comp::is_compensator<with_keep>::value);
  CHECK_FALSE(comp::is_compensator<no_keep>::value);
  CHECK_FALSE(comp::is_compensator<odd_storage>::value);
  CHECK_FALSE(comp::is_compensator<no_bytes>::value);
  CHECK_FALSE(comp::is_compensator<int>::value);
}
