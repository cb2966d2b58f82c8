// reference::residual_rms_norm, the spec of the fused epilogue: the residual is residual + out
// rounded once; the normalised rows are within rounding of an fp64 RMSNorm; the sum of squares
// follows sum_order (checked against an independent fp64-free rendering of it); rows do not
// depend on their neighbours or position; bad arguments throw. And reference::all_reduce's
// epilogue form is the all-reduce followed by it on every rank.
#include <echo/echo.cuh>

#include "support/bits.hpp"
#include "support/random.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

using echo::bfloat16_t;
using echo::half_t;
using echo_test::narrow;
using echo_test::widen;
namespace epilogue = echo::epilogue;

namespace {

/// sum_order written out the long way: the squares of a slice's chunks in lane-major lists, each
/// lane's list summed left to right, the butterfly as explicit pairs at each distance.
template <class T>
float sum_of_squares(const std::vector<T>& row) {
  const size_t chunks = row.size() / 8;
  std::vector<float> slice_sum;
  for (size_t v = 0; v < 8; ++v) {
    std::vector<float> lane(32, 0.0f);
    for (size_t j = 0; j < 32; ++j)
      for (size_t c = v * 32 + j; c < chunks; c += 256)
        for (size_t i = 0; i < 8; ++i) {
          const float x = widen(row[c * 8 + i]);
          lane[j] = std::fma(x, x, lane[j]);
        }
    for (size_t m = 16; m >= 1; m /= 2) {
      std::vector<float> next(32);
      for (size_t j = 0; j < 32; ++j) next[j] = lane[j] + lane[j ^ m];
      lane = next;
    }
    slice_sum.push_back(lane[0]);
  }
  return ((slice_sum[0] + slice_sum[1]) + (slice_sum[2] + slice_sum[3])) +
         ((slice_sum[4] + slice_sum[5]) + (slice_sum[6] + slice_sum[7]));
}

template <class T>
void check_rows(echo_test::rng& g, size_t rows, size_t hidden, float eps) {
  const size_t n = rows * hidden;
  const std::vector<T> a = echo_test::random_elements<T>(g, n), res0 = echo_test::random_elements<T>(g, n),
                       w = echo_test::random_elements<T>(g, hidden);
  std::vector<T> out = a, res = res0;
  echo::reference::residual_rms_norm(epilogue::residual_rms_norm<T>{res.data(), w.data(), hidden, eps}, out.data(), n);
  for (size_t r = 0; r < rows; ++r) {
    std::vector<T> row(res.begin() + static_cast<long>(r * hidden), res.begin() + static_cast<long>((r + 1) * hidden));
    double ss = 0;
    for (size_t i = 0; i < hidden; ++i) {
      const size_t k = r * hidden + i;
      INFO("row " << r << " of " << rows << ", value " << i << " of " << hidden << ", " << echo_test::type_name<T>());
      REQUIRE(echo_test::bits_of(res[k]) == echo_test::bits_of(narrow<T>(widen(res0[k]) + widen(a[k]))));
      ss += static_cast<double>(widen(res[k])) * widen(res[k]);
    }
    const float inv = 1.0f / std::sqrt(sum_of_squares(row) / static_cast<float>(hidden) + eps);
    const double exact_inv = 1.0 / std::sqrt(ss / static_cast<double>(hidden) + eps);
    for (size_t i = 0; i < hidden; ++i) {
      const size_t k = r * hidden + i;
      const float want = widen(narrow<T>(widen(narrow<T>(widen(res[k]) * inv)) * widen(w[i])));
      INFO("row " << r << ", value " << i << ", " << echo_test::type_name<T>());
      REQUIRE(echo_test::bits_of(out[k]) == echo_test::bits_of(narrow<T>(want)));
      // and within two roundings to T of the fp64 RMSNorm (fp16's subnormals: an absolute step)
      const double exact = widen(res[k]) * exact_inv * widen(w[i]);
      const double ulp = std::is_same<T, float>::value ? 1e-6 : std::is_same<T, half_t>::value ? 1e-3 : 8e-3;
      const double tiny = std::is_same<T, half_t>::value ? 1.2e-7 : 1e-30;
      REQUIRE(std::fabs(widen(out[k]) - exact) <= 2.5 * ulp * std::fabs(exact) + tiny);
    }
  }
}

}  // namespace

TEST_CASE("residual_rms_norm: the residual, the order of the sum and the normalised rows, every type") {
  ECHO_TEST_RNG(g);
  for (size_t hidden : {8, 16, 24, 256, 264, 2048, 2056, 4096, 16384}) {
    check_rows<bfloat16_t>(g, 3, hidden, 1e-6f);
    check_rows<half_t>(g, 2, hidden, 1e-5f);
    check_rows<float>(g, 2, hidden, 0.0f);
  }
}

TEST_CASE("residual_rms_norm: a row's result depends on that row only, wherever it stands") {
  ECHO_TEST_RNG(g);
  const size_t hidden = 4096, rows = 5, n = rows * hidden;
  const auto a = echo_test::random_elements<bfloat16_t>(g, n), res0 = echo_test::random_elements<bfloat16_t>(g, n),
             w = echo_test::random_elements<bfloat16_t>(g, hidden);
  std::vector<bfloat16_t> out = a, res = res0;
  echo::reference::residual_rms_norm(epilogue::residual_rms_norm<bfloat16_t>{res.data(), w.data(), hidden, 1e-6f}, out.data(), n);
  for (size_t r = 0; r < rows; ++r) {
    std::vector<bfloat16_t> o1(a.begin() + static_cast<long>(r * hidden), a.begin() + static_cast<long>((r + 1) * hidden));
    std::vector<bfloat16_t> r1(res0.begin() + static_cast<long>(r * hidden), res0.begin() + static_cast<long>((r + 1) * hidden));
    echo::reference::residual_rms_norm(epilogue::residual_rms_norm<bfloat16_t>{r1.data(), w.data(), hidden, 1e-6f}, o1.data(), hidden);
    CHECK(echo_test::first_difference(o1.data(), out.data() + r * hidden, hidden) == hidden);
    CHECK(echo_test::first_difference(r1.data(), res.data() + r * hidden, hidden) == hidden);
  }
}

TEST_CASE("residual_rms_norm: a zero row with epsilon 0 gives NaN, as IEEE says; a zero row with epsilon gives 0") {
  std::vector<float> out(16, 0.0f), res(16, 0.0f), w(16, 1.0f);
  echo::reference::residual_rms_norm(epilogue::residual_rms_norm<float>{res.data(), w.data(), 16, 0.0f}, out.data(), 16);
  for (float x : out) CHECK(std::isnan(x));
  std::fill(out.begin(), out.end(), 0.0f);
  echo::reference::residual_rms_norm(epilogue::residual_rms_norm<float>{res.data(), w.data(), 16, 1e-6f}, out.data(), 16);
  for (float x : out) CHECK(x == 0.0f);
}

TEST_CASE("residual_rms_norm: bad arguments throw, naming the argument") {
  std::vector<float> out(64), res(64), w(64);
  auto why = [&](size_t hidden, size_t n, float eps) -> std::string {
    try {
      echo::reference::residual_rms_norm(epilogue::residual_rms_norm<float>{res.data(), w.data(), hidden, eps}, out.data(), n);
    } catch (const echo::error& e) {
      return e.what();
    }
    return "";
  };
  CHECK(why(12, 48, 0.0f).find("epilogue.hidden: must be a positive multiple of 8") != std::string::npos);
  CHECK(why(0, 64, 0.0f).find("epilogue.hidden") != std::string::npos);
  CHECK(why(16384 + 8, 16384 + 8, 0.0f).find("above 16384") != std::string::npos);
  CHECK(why(32, 48, 0.0f).find("whole number of rows") != std::string::npos);
  CHECK(why(16, 64, -1.0f).find("epilogue.epsilon") != std::string::npos);
  CHECK(why(16, 64, INFINITY).find("epilogue.epsilon") != std::string::npos);
  CHECK(why(16, 64, 0.0f).empty());
}

TEST_CASE("reference::all_reduce with epilogues: the all-reduce, then each rank's epilogue") {
  ECHO_TEST_RNG(g);
  const int P = 3;
  const size_t hidden = 512, n = 6 * hidden;
  using Q = echo::quant::zero_aware<4, 128>;
  using C = echo::comp::error_feedback<bfloat16_t>;
  echo::reference::all_reduce<Q, C> ref(P);
  echo::reference::chain_state<C> ch1(P, n), ch2(P, n);
  for (int call = 0; call < 3; ++call) {
    std::vector<std::vector<bfloat16_t>> in(P), res(P), w(P), out1(P, std::vector<bfloat16_t>(n)), out2 = out1;
    std::vector<const bfloat16_t*> ri;
    std::vector<bfloat16_t*> o1, o2;
    std::vector<epilogue::residual_rms_norm<bfloat16_t>> epi;
    for (int r = 0; r < P; ++r) {
      in[r] = echo_test::random_elements<bfloat16_t>(g, n);
      res[r] = echo_test::random_elements<bfloat16_t>(g, n);
      w[r] = echo_test::random_elements<bfloat16_t>(g, hidden);
    }
    auto res2 = res;
    for (int r = 0; r < P; ++r) {
      ri.push_back(in[r].data());
      o1.push_back(out1[r].data());
      o2.push_back(out2[r].data());
      epi.push_back({res[r].data(), w[r].data(), hidden, 1e-6f});
    }
    ref(ri, o1, n, epi, &ch1);
    ref(ri, o2, n, &ch2);
    for (int r = 0; r < P; ++r) {
      echo::reference::residual_rms_norm(epilogue::residual_rms_norm<bfloat16_t>{res2[r].data(), w[r].data(), hidden, 1e-6f},
                                         out2[r].data(), n);
      CHECK(echo_test::first_difference(out1[r].data(), out2[r].data(), n) == n);
      CHECK(echo_test::first_difference(res[r].data(), res2[r].data(), n) == n);
    }
  }
  std::vector<epilogue::residual_rms_norm<bfloat16_t>> two(2);
  std::vector<const bfloat16_t*> ri(P, nullptr);
  std::vector<bfloat16_t*> ro(P, nullptr);
  CHECK_THROWS_AS(ref(ri, ro, 0, two, &ch1), echo::error);
}
