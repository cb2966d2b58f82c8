// reference::reduce_scatter and reference::all_gather, the spec of the sequence-parallel
// collectives: without quantization they are exact (the rank-order fp32 sum rounded once, a
// copy) and together equal the exact all-reduce; quantized, every value goes through one
// quantization, every rank of an all-gather holds the same bits, error feedback along a chain of
// reduce-scatters keeps the sum of the outputs within one call's error of the exact sum (without
// it the error of a systematic input grows with every call); and bad layouts throw.
#include <echo/echo.cuh>
#include <echo/reference/all_gather.cuh>
#include <echo/reference/reduce_scatter.cuh>

#include "support/bits.hpp"
#include "support/random.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

using echo::bfloat16_t;
using echo_test::narrow;
using echo_test::widen;
namespace quant = echo::quant;
namespace comp = echo::comp;

namespace {

template <class T>
struct ranks_of {
  std::vector<std::vector<T>> in, out;
  std::vector<const T*> ip;
  std::vector<T*> op;
  ranks_of(echo_test::rng& g, int P, size_t n_in, size_t n_out) {
    for (int r = 0; r < P; ++r) {
      in.push_back(echo_test::random_elements<T>(g, n_in));
      out.emplace_back(n_out);
    }
    for (int r = 0; r < P; ++r) {
      ip.push_back(in[r].data());
      op.push_back(out[r].data());
    }
  }
};

}  // namespace

TEST_CASE("reduce_scatter and all_gather without quantization: exact, and together the exact all-reduce") {
  ECHO_TEST_RNG(g);
  for (int P : {2, 3, 4, 8}) {
    const size_t m = 512, n = m * static_cast<size_t>(P);
    ranks_of<bfloat16_t> x(g, P, n, m);
    echo::reference::reduce_scatter<quant::none> rs(P);
    rs(x.ip, x.op, n);
    for (int j = 0; j < P; ++j)
      for (size_t k = 0; k < m; ++k) {
        float s = widen(x.in[0][j * m + k]);
        for (int i = 1; i < P; ++i) s += widen(x.in[i][j * m + k]);
        REQUIRE(echo_test::bits_of(x.out[j][k]) == echo_test::bits_of(narrow<bfloat16_t>(s)));
      }
    std::vector<std::vector<bfloat16_t>> gathered(P, std::vector<bfloat16_t>(n)), ar(P, std::vector<bfloat16_t>(n));
    std::vector<const bfloat16_t*> seg;
    std::vector<bfloat16_t*> go, ao;
    for (int r = 0; r < P; ++r) {
      seg.push_back(x.out[r].data());
      go.push_back(gathered[r].data());
      ao.push_back(ar[r].data());
    }
    const echo::reference::all_gather<quant::none> ag(P);
    const echo::reference::all_reduce<quant::none> all(P);
    ag(seg, go, m);
    all(x.ip, ao, n);
    for (int r = 0; r < P; ++r) CHECK(echo_test::first_difference(gathered[r].data(), ar[r].data(), n) == n);
  }
}

TEST_CASE("all_gather quantized: every rank the same bits, each segment one quantization of its rank's input") {
  ECHO_TEST_RNG(g);
  const int P = 4;
  const size_t m = 1024;
  auto check = [&](auto q) {
    using Q = decltype(q);
    ranks_of<bfloat16_t> x(g, P, m, m * P);
    const echo::reference::all_gather<Q> ag(P);
    ag(x.ip, x.op, m);
    for (int r = 1; r < P; ++r) CHECK(echo_test::first_difference(x.out[r].data(), x.out[0].data(), m * P) == m * P);
    for (int j = 0; j < P; ++j) {
      // the same codes as the all-reduce's first quantization of that segment would give
      const std::vector<float> f = [&] {
        std::vector<float> v(m);
        for (size_t k = 0; k < m; ++k) v[k] = widen(x.in[j][k]);
        return v;
      }();
      std::vector<float> t = f;
      using transform = quant::transform_of_t<Q>;
      if constexpr (transform::active)
        for (size_t k = 0; k < m; k += Q::group) transform::forward(&t[k]);
      const auto y = echo::reference::back_from_domain<Q, bfloat16_t>(echo::reference::round_trip<Q, bfloat16_t>(t.data(), m));
      for (size_t k = 0; k < m; ++k)
        REQUIRE(echo_test::bits_of(x.out[0][j * m + k]) == echo_test::bits_of(narrow<bfloat16_t>(y[k])));
      double err = 0, norm = 0;
      for (size_t k = 0; k < m; ++k) {
        err += std::pow(widen(x.out[0][j * m + k]) - f[k], 2);
        norm += f[k] * f[k];
      }
      CHECK(std::sqrt(err / norm) < (Q::bits == 4 ? 0.35 : 0.03));  // 1 % of the inputs are 20x outliers
    }
  };
  check(quant::zero_aware<4, 128>{});
  check(quant::zero_aware<8, 128>{});
  check(quant::rotated<quant::clipped<quant::zero_aware<4, 128>, 870>>{});  // the recommended default
}

TEST_CASE("reduce_scatter with error feedback: a chain of calls keeps the running sum within one call's error") {
  ECHO_TEST_RNG(g);
  const int P = 2, calls = 24;
  const size_t m = 1024, n = m * P;
  using Q = quant::zero_aware<4, 128>;
  using C = comp::error_feedback<comp::int8_state>;
  // the same input every call: its quantization error is systematic, so without feedback the sum's
  // error grows with the calls
  ranks_of<float> x(g, P, n, m);
  echo::reference::reduce_scatter<Q, C> with(P);
  echo::reference::reduce_scatter<Q> without(P);
  echo::reference::chain_state<C> chain(P, n);
  std::vector<std::vector<double>> sum_ef(P, std::vector<double>(m)), sum_plain = sum_ef;
  for (int c = 0; c < calls; ++c) {
    with(x.ip, x.op, n, &chain);
    for (int j = 0; j < P; ++j)
      for (size_t k = 0; k < m; ++k) sum_ef[j][k] += x.out[j][k];
    without(x.ip, x.op, n);
    for (int j = 0; j < P; ++j)
      for (size_t k = 0; k < m; ++k) sum_plain[j][k] += x.out[j][k];
  }
  double e_ef = 0, e_plain = 0, norm = 0;
  for (int j = 0; j < P; ++j)
    for (size_t k = 0; k < m; ++k) {
      double exact = 0;
      for (int i = 0; i < P; ++i) exact += x.in[i][j * m + k];
      exact *= calls;
      e_ef += std::pow(sum_ef[j][k] - exact, 2);
      e_plain += std::pow(sum_plain[j][k] - exact, 2);
      norm += exact * exact;
    }
  e_ef = std::sqrt(e_ef / norm);
  e_plain = std::sqrt(e_plain / norm);
  INFO("relative error of the sum over " << calls << " calls: with feedback " << e_ef << ", without " << e_plain);
  CHECK(e_ef * 8 < e_plain);
  CHECK(chain.continues());
}

TEST_CASE("reduce_scatter: the owner's segment keeps no error; a shape change restarts the chain") {
  ECHO_TEST_RNG(g);
  const int P = 3;
  const size_t m = 256, n = m * P;
  using Q = quant::zero_aware<4, 128>;
  using C = comp::error_feedback<float>;
  ranks_of<float> x(g, P, n, m);
  echo::reference::reduce_scatter<Q, C> rs(P);
  echo::reference::chain_state<C> chain(P, 2 * n);
  rs(x.ip, x.op, n, &chain);
  for (int r = 0; r < P; ++r)
    for (size_t k = 0; k < n; ++k) {
      const bool own = k / m == static_cast<size_t>(r);
      if (own) REQUIRE(chain.error(r, k) == 0.0f);
    }
  ranks_of<float> y(g, P, 2 * n, 2 * m);
  rs(y.ip, y.op, 2 * n, &chain);  // another n: a fresh chain, nothing added
  echo::reference::reduce_scatter<Q, C> again(P);
  echo::reference::chain_state<C> fresh(P, 2 * n);
  std::vector<std::vector<float>> out2(P, std::vector<float>(2 * m));
  std::vector<float*> o2;
  for (auto& v : out2) o2.push_back(v.data());
  again(y.ip, o2, 2 * n, &fresh);
  for (int r = 0; r < P; ++r) CHECK(echo_test::first_difference(out2[r].data(), y.out[r].data(), 2 * m) == 2 * m);
}

TEST_CASE("reduce_scatter and all_gather: layouts that are not P equal whole-group segments throw") {
  using Q = quant::zero_aware<4, 128>;
  CHECK(echo::reference::segment_error<Q>(128 * 3, 3) == nullptr);
  CHECK(std::string(echo::reference::segment_error<Q>(128 * 3 + 1, 3)).find("n % P") != std::string::npos);
  CHECK(std::string(echo::reference::segment_error<Q>(64 * 4, 4)).find("groups") != std::string::npos);
  std::vector<float> a(300), b(300);
  std::vector<const float*> i{a.data(), b.data()};
  std::vector<float*> o{a.data(), b.data()};
  const echo::reference::reduce_scatter<Q> rs(2);
  const echo::reference::all_gather<Q> ag(2);
  CHECK_THROWS_AS(rs(i, o, 300), echo::error);
  CHECK_THROWS_AS(ag(i, o, 100), echo::error);
}
