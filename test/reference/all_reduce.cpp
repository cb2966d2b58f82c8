// reference::all_reduce: exactness without quantization, identical outputs on all ranks, at most
// two quantizations, in-place operation, the runtime-dtype form, and argument checking.
#include <echo/echo.cuh>

#include "support/bits.hpp"
#include "support/check.hpp"
#include "support/quant.hpp"
#include "support/random.hpp"
#include "support/reference.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <initializer_list>
#include <limits>
#include <string>

using echo::bfloat16_t;
using echo::half_t;
namespace quant = echo::quant;
namespace comp = echo::comp;
using echo_test::ranks_data;

namespace {

template <class Q, class T>
struct cfg {
  using quantizer = Q;
  using type = T;
};

#define ECHO_TEST_AR_CONFIGS                                                                                  \
  cfg<quant::none, float>, cfg<quant::none, half_t>, cfg<quant::none, bfloat16_t>,                           \
      cfg<quant::zero_aware<4, 128>, float>, cfg<quant::zero_aware<4, 128>, half_t>,                        \
      cfg<quant::zero_aware<4, 128>, bfloat16_t>, cfg<quant::naive_zero_point<4, 128>, bfloat16_t>,           \
      cfg<quant::symmetric<4, 128>, bfloat16_t>, cfg<quant::zero_aware<2, 32>, float>,                       \
      cfg<quant::zero_aware<8, 256>, half_t>, cfg<quant::zero_aware<3, 64>, bfloat16_t>,                     \
      cfg<quant::symmetric<6, 32>, float>, cfg<quant::naive_zero_point<8, 64>, float>

size_t random_size(echo_test::rng& rng) {
  const auto& s = echo_test::awkward_sizes();
  return rng.coin(0.6) ? s[rng.uniform_int<size_t>(0, s.size() - 1)] : rng.uniform_int<size_t>(1, 6000);
}

/// What the algorithm specifies, written independently of the reference's code: owner j of a
/// segment sums in rank order its own exact x_j and D(Q(x_i)) of every other rank's segment
/// (each quantized through the wire layout on its own), then every rank gets T(D(Q(S))).
template <class Q, class T>
std::vector<T> model(const ranks_data<T>& d) {
  const int P = d.ranks();
  const size_t n = d.size();
  std::vector<T> out(n);
  const echo::detail::partition part{n, echo::detail::granule_of<Q>(), P};
  for (int j = 0; j < P; ++j) {
    const size_t b = part.begin(j), len = part.size(j);
    if (len == 0) continue;
    std::vector<std::vector<float>> term(static_cast<size_t>(P), std::vector<float>(len));
    for (int i = 0; i < P; ++i) {
      for (size_t k = 0; k < len; ++k) term[i][k] = echo_test::widen(d.in[i][b + k]);
      if constexpr (Q::quantizes)
        if (i != j) term[i] = echo_test::encode_decode<Q>(term[i]).decoded;  // (quant::none: T values travel exactly)
    }
    std::vector<float> S(len);
    for (size_t k = 0; k < len; ++k) {
      float acc = term[0][k];
      for (int i = 1; i < P; ++i) acc += term[i][k];
      S[k] = acc;
    }
    std::vector<float> g = S;
    if constexpr (Q::quantizes) g = echo_test::encode_decode<Q>(S).decoded;
    for (size_t k = 0; k < len; ++k) out[b + k] = echo_test::narrow<T>(g[k]);
  }
  return out;
}

}  // namespace

TEST_CASE_TEMPLATE("quant::none: the exact fp32 rank-order sum rounded once to T, P = 1..16", T, float, half_t,
                   bfloat16_t) {
  ECHO_TEST_RNG(rng);
  echo_test::failure_counter fails;
  for (int P = 1; P <= 16; ++P) {
    const size_t n = random_size(rng);
    CAPTURE(P);
    CAPTURE(n);
    ranks_data<T> d(P, n);
    d.randomize(rng);
    echo::reference::all_reduce<quant::none> ar(P);
    std::vector<uint8_t> quantizations(n, 99);
    auto out = d.out_ptrs();
    ar(d.in_ptrs(), out, n, nullptr, &quantizations);
    for (size_t k = 0; k < n; ++k) {
      float acc = echo_test::widen(d.in[0][k]);
      for (int r = 1; r < P; ++r) acc += echo_test::widen(d.in[r][k]);
      const T want = echo_test::narrow<T>(acc);
      for (int r = 0; r < P; ++r)
        ECHO_EXPECT(fails, echo_test::same_bits(d.out[r][k], want),
                    "rank " << r << " element " << k << ": " << echo_test::widen(d.out[r][k]) << " != " << echo_test::widen(want));
      ECHO_EXPECT(fails, quantizations[k] == 0, "quantizations " << int(quantizations[k]) << " at " << k);
    }
    if (P == 1) CHECK(echo_test::same_bytes(d.out[0], d.in[0]));  // an exact copy
  }
  CHECK(fails.failures == 0);
}

TEST_CASE_TEMPLATE("every rank gets identical outputs, the model's: at most two quantizations, P = 2..16", C,
                   ECHO_TEST_AR_CONFIGS) {
  using Q = typename C::quantizer;
  using T = typename C::type;
  ECHO_TEST_RNG(rng);
  INFO("quantizer " << std::string(Q::name) << ", T = " << echo_test::type_name<T>());
  for (int P = 2; P <= 16; ++P) {
    const size_t n = random_size(rng);
    CAPTURE(P);
    CAPTURE(n);
    ranks_data<T> d(P, n);
    d.randomize(rng);
    std::vector<uint8_t> quantizations;
    auto out = d.out_ptrs();
    const echo::reference::all_reduce<Q> ar(P);
    ar(d.in_ptrs(), out, n, nullptr, &quantizations);
    CHECK(d.outputs_identical());
    const std::vector<T> want = model<Q, T>(d);
    CHECK(echo_test::first_difference(d.out[0].data(), want.data(), n) == n);
    REQUIRE(quantizations.size() == n);
    const uint8_t depth = Q::quantizes ? 2 : 0;
    size_t wrong = 0;
    for (uint8_t q : quantizations) wrong += q != depth;
    CHECK(wrong == 0);

    // with error feedback too, over a few calls of a chain
    echo::reference::all_reduce<Q, comp::error_feedback<>> ef(P);
    echo::reference::chain_state<comp::error_feedback<>> ch(P, n);
    for (int call = 0; call < 3; ++call) {
      d.randomize(rng);
      ef(d.in_ptrs(), out, n, &ch, &quantizations);
      CHECK(d.outputs_identical());
      for (uint8_t q : quantizations) wrong += q > 2;
      CHECK(wrong == 0);
    }
  }
}

TEST_CASE("P = 1: an exact copy with 0 quantizations for every quantizer and compensator") {
  ECHO_TEST_RNG(rng);
  const size_t n = 1000;
  ranks_data<bfloat16_t> d(1, n);
  d.randomize(rng);
  std::vector<uint8_t> quantizations;
  auto out = d.out_ptrs();
  const echo::reference::all_reduce<quant::zero_aware<2, 32>> plain(1);
  plain(d.in_ptrs(), out, n, nullptr, &quantizations);
  CHECK(echo_test::same_bytes(d.out[0], d.in[0]));
  CHECK(quantizations == std::vector<uint8_t>(n, 0));
  echo::reference::chain_state<comp::error_feedback<>> ch(1, n);
  std::fill(d.out[0].begin(), d.out[0].end(), bfloat16_t{0});
  const echo::reference::all_reduce<quant::symmetric<4, 128>, comp::error_feedback<>> ef(1);
  ef(d.in_ptrs(), out, n, &ch, &quantizations);
  CHECK(echo_test::same_bytes(d.out[0], d.in[0]));
  CHECK(quantizations == std::vector<uint8_t>(n, 0));
}

TEST_CASE_TEMPLATE("in place (out == in) equals out of place, with and without error feedback", C, ECHO_TEST_AR_CONFIGS) {
  using Q = typename C::quantizer;
  using T = typename C::type;
  ECHO_TEST_RNG(rng);
  INFO("quantizer " << std::string(Q::name) << ", T = " << echo_test::type_name<T>());
  for (int P : {2, 3, 8}) {
    const size_t n = random_size(rng);
    CAPTURE(P);
    CAPTURE(n);
    echo::reference::all_reduce<Q, comp::error_feedback<>> ar(P);
    echo::reference::chain_state<comp::error_feedback<>> c1(P, n), c2(P, n);
    for (int call = 0; call < 3; ++call) {
      ranks_data<T> d(P, n);
      d.randomize(rng);
      ranks_data<T> inplace = d;
      auto out = d.out_ptrs();
      ar(d.in_ptrs(), out, n, &c1);
      std::vector<T*> io;
      std::vector<const T*> ic;
      for (auto& v : inplace.in) {
        io.push_back(v.data());
        ic.push_back(v.data());
      }
      ar(ic, io, n, &c2);
      for (int r = 0; r < P; ++r) CHECK(echo_test::same_bytes(inplace.in[r], d.out[r]));
    }
    ranks_data<T> d(P, n);
    d.randomize(rng);
    ranks_data<T> inplace = d;
    auto out = d.out_ptrs();
    const echo::reference::all_reduce<Q> plain(P);
    plain(d.in_ptrs(), out, n);
    std::vector<T*> io;
    std::vector<const T*> ic;
    for (auto& v : inplace.in) {
      io.push_back(v.data());
      ic.push_back(v.data());
    }
    plain(ic, io, n);
    for (int r = 0; r < P; ++r) CHECK(echo_test::same_bytes(inplace.in[r], d.out[r]));
  }
}

namespace {
template <class T>
void check_runtime_dtype(echo_test::rng& rng, echo::dtype tag) {
  using Q = quant::zero_aware<4, 128>;
  using EF = comp::error_feedback<>;
  const int P = 4;
  const size_t n = random_size(rng);
  CAPTURE(n);
  echo::reference::all_reduce<Q, EF> ar(P);
  echo::reference::chain_state<EF> typed_chain(P, n), runtime_chain(P, n);
  for (int call = 0; call < 3; ++call) {
    ranks_data<T> d(P, n);
    d.randomize(rng);
    ranks_data<T> e = d;
    std::vector<uint8_t> q1, q2;
    auto out = d.out_ptrs();
    ar(d.in_ptrs(), out, n, &typed_chain, &q1);
    std::vector<const void*> vin;
    std::vector<void*> vout;
    for (int r = 0; r < P; ++r) {
      vin.push_back(e.in[r].data());
      vout.push_back(e.out[r].data());
    }
    ar(tag, vin, vout, n, &runtime_chain, &q2);
    for (int r = 0; r < P; ++r) CHECK(echo_test::same_bytes(d.out[r], e.out[r]));
    CHECK(q1 == q2);
  }
  for (int r = 0; r < P; ++r)
    for (size_t k = 0; k < n; ++k) REQUIRE(echo_test::same_bits(typed_chain.error(r, k), runtime_chain.error(r, k)));
}
}  // namespace

TEST_CASE("the runtime-dtype overload equals the typed one") {
  ECHO_TEST_RNG(rng);
  CHECK(echo::element_traits<float>::tag == echo::dtype::f32);
  CHECK(echo::element_traits<half_t>::tag == echo::dtype::f16);
  CHECK(echo::element_traits<bfloat16_t>::tag == echo::dtype::bf16);
  SUBCASE("f32") { check_runtime_dtype<float>(rng, echo::dtype::f32); }
  SUBCASE("f16") { check_runtime_dtype<half_t>(rng, echo::dtype::f16); }
  SUBCASE("bf16") { check_runtime_dtype<bfloat16_t>(rng, echo::dtype::bf16); }
}

namespace {
// Runs f and checks it throws echo::error whose call() names `call`.
template <class F>
void check_throws_naming(F&& f, const std::string& call) {
  bool thrown = false;
  try {
    f();
  } catch (const echo::error& e) {
    thrown = true;
    INFO("what(): " << e.what());
    CHECK(e.call() == call);
  }
  CHECK(thrown);
}
}  // namespace

TEST_CASE("bad arguments throw echo::error") {
  using Q = quant::zero_aware<4, 128>;
  using EF = comp::error_feedback<>;
  const std::string call = "echo::reference::all_reduce";
  const int P = 3;
  const size_t n = 1000;
  ranks_data<float> d(P, n);
  for (auto& v : d.in) std::fill(v.begin(), v.end(), 1.0f);
  const echo::reference::all_reduce<Q> plain(P);
  const echo::reference::all_reduce<Q, EF> ef(P);
  echo::reference::chain_state<EF> ch(P, n);
  auto in = d.in_ptrs();
  auto out = d.out_ptrs();

  SUBCASE("ranks outside [1, 1024]") {
    check_throws_naming([] { echo::reference::all_reduce<Q> a(0); }, call);
    check_throws_naming([] { echo::reference::all_reduce<Q> a(1025); }, call);
    CHECK_NOTHROW(echo::reference::all_reduce<Q>(1024));
  }
  SUBCASE("mismatched numbers of rank buffers") {
    auto in2 = in;
    in2.pop_back();
    check_throws_naming([&] { plain(in2, out, n); }, call);
    auto out2 = out;
    out2.push_back(out[0]);
    check_throws_naming([&] { plain(in, out2, n); }, call);
    check_throws_naming([&] { ef(in2, out, n, &ch); }, call);
  }
  SUBCASE("null pointers") {
    for (int r = 0; r < P; ++r) {
      auto in2 = in;
      in2[r] = nullptr;
      check_throws_naming([&] { plain(in2, out, n); }, call);
      auto out2 = out;
      out2[r] = nullptr;
      check_throws_naming([&] { plain(in, out2, n); }, call);
    }
    // nothing to read or write: null buffers are fine for n = 0
    std::vector<const float*> nin(P, nullptr);
    std::vector<float*> nout(P, nullptr);
    CHECK_NOTHROW(plain(nin, nout, 0));
    CHECK_NOTHROW(ef(nin, nout, 0, &ch));
  }
  SUBCASE("a chain with the wrong number of ranks") {
    echo::reference::chain_state<EF> wrong(P + 1, n);
    check_throws_naming([&] { ef(in, out, n, &wrong); }, call);
    echo::reference::chain_state<EF> fewer(P - 1, n);
    check_throws_naming([&] { ef(in, out, n, &fewer); }, call);
  }
  SUBCASE("error_feedback without a chain") { check_throws_naming([&] { ef(in, out, n); }, call); }
  SUBCASE("n above the chain's capacity") {
    echo::reference::chain_state<EF> small(P, n - 1);
    check_throws_naming([&] { ef(in, out, n, &small); }, call);
  }
  SUBCASE("unsupported runtime dtype") {
    std::vector<const void*> vin(in.begin(), in.end());
    std::vector<void*> vout(out.begin(), out.end());
    for (int bad : {3, 7, -1}) {
      CAPTURE(bad);
      check_throws_naming([&] { plain(static_cast<echo::dtype>(bad), vin, vout, n); }, "echo::dispatch_dtype");
      CHECK_THROWS_AS(echo::size_of(static_cast<echo::dtype>(bad)), echo::error);
      CHECK(std::string(echo::to_string(static_cast<echo::dtype>(bad))) == "unknown");
    }
    CHECK(echo::size_of(echo::dtype::f32) == 4);
    CHECK(echo::size_of(echo::dtype::bf16) == 2);
  }
  // a rejected call changes nothing: the outputs were never written
  for (auto& v : d.out)
    for (float x : v) REQUIRE(x == 0.0f);
}

TEST_CASE_TEMPLATE("NaN / Inf in one rank's input: its group's outputs are NaN on every rank, the rest untouched", Q,
                   quant::zero_aware<4, 128>, quant::naive_zero_point<4, 64>, quant::symmetric<8, 32>,
                   quant::zero_aware<2, 256>) {
  ECHO_TEST_RNG(rng);
  constexpr size_t g = Q::group;
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    for (int P : {2, 3, 8}) {
      const size_t n = rng.uniform_int<size_t>(1, 20 * g);
      const int rank = rng.uniform_int(0, P - 1);
      const size_t at = rng.uniform_int<size_t>(0, n - 1);
      CAPTURE(bad);
      CAPTURE(P);
      CAPTURE(n);
      CAPTURE(rank);
      CAPTURE(at);
      ranks_data<bfloat16_t> clean(P, n);
      clean.randomize(rng);
      ranks_data<bfloat16_t> dirty = clean;
      dirty.in[rank][at] = echo_test::narrow<bfloat16_t>(bad);
      const echo::reference::all_reduce<Q> ar(P);
      auto co = clean.out_ptrs(), dout = dirty.out_ptrs();
      ar(clean.in_ptrs(), co, n);
      ar(dirty.in_ptrs(), dout, n);
      CHECK(dirty.outputs_identical());
      // segments start on group boundaries, so the poisoned group is the one holding `at`
      const size_t first = at / g * g, last = std::min(n, first + g);
      size_t wrong = 0;
      for (size_t k = 0; k < n; ++k) {
        const float v = echo_test::widen(dirty.out[0][k]);
        if (k >= first && k < last) wrong += !std::isnan(v);
        else wrong += !echo_test::same_bits(dirty.out[0][k], clean.out[0][k]);
      }
      CHECK(wrong == 0);
    }
  }
}

TEST_CASE("quant::none: NaN / Inf propagate element-wise, as NCCL's sum does") {
  ECHO_TEST_RNG(rng);
  const int P = 4;
  const size_t n = 1000;
  ranks_data<float> d(P, n);
  d.randomize(rng);
  d.in[1][10] = std::numeric_limits<float>::quiet_NaN();
  d.in[2][20] = std::numeric_limits<float>::infinity();
  d.in[0][30] = std::numeric_limits<float>::infinity();
  d.in[3][30] = -std::numeric_limits<float>::infinity();
  auto out = d.out_ptrs();
  echo::reference::all_reduce<quant::none> ar(P);
  ar(d.in_ptrs(), out, n);
  CHECK(d.outputs_identical());
  for (size_t k = 0; k < n; ++k) {
    CAPTURE(k);
    const float v = d.out[0][k];
    if (k == 10 || k == 30) CHECK(std::isnan(v));
    else if (k == 20) CHECK(v == std::numeric_limits<float>::infinity());
    else CHECK(std::isfinite(v));
  }
}

// Regression: the error stored for a group that held a NaN / Inf was NaN (x' - NaN), and the next
// call added it back, poisoning the group for the rest of the chain. NCCL's sum forgets a NaN
// after the call that carried it; so does Echo now (comp::error_feedback::keep stores 0).
TEST_CASE("error_feedback: a NaN in one call does not poison later calls of the chain") {
  ECHO_TEST_RNG(rng);
  using Q = quant::zero_aware<4, 128>;
  using EF = comp::error_feedback<>;
  const int P = 2;
  const size_t n = 1000;
  echo::reference::all_reduce<Q, EF> ar(P);
  echo::reference::chain_state<EF> ch(P, n);
  ranks_data<float> d(P, n);
  auto out = d.out_ptrs();
  for (int call = 0; call < 3; ++call) {
    d.randomize(rng);
    if (call == 0) d.in[1][5] = std::numeric_limits<float>::quiet_NaN();
    ar(d.in_ptrs(), out, n, &ch);
  }
  size_t nans = 0;
  for (float v : d.out[0]) nans += std::isnan(v);
  CHECK(nans == 0);
}
