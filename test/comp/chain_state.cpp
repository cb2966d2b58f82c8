// reference::chain_state: what ends a chain (reset, a shape change) and what a call may not do.
#include <echo/echo.cuh>

#include "support/bits.hpp"
#include "support/random.hpp"
#include "support/reference.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace comp = echo::comp;
using Q = echo::quant::zero_aware<4, 64>;
using EF = comp::error_feedback<float>;

namespace {
template <class Comp>
size_t nonzero_errors(const echo::reference::chain_state<Comp>& ch, size_t n) {
  size_t c = 0;
  for (int r = 0; r < ch.ranks(); ++r)
    for (size_t k = 0; k < n; ++k) c += ch.error(r, k) != 0.0f;
  return c;
}
}  // namespace

TEST_CASE("chain_state: construction") {
  echo::reference::chain_state<EF> ch(4, 1000);
  CHECK(ch.ranks() == 4);
  CHECK(ch.capacity() == 1000);
  CHECK(ch.size() == 0);
  CHECK(nonzero_errors(ch, 1000) == 0);
  CHECK_THROWS_AS(echo::reference::chain_state<EF>(0, 10), echo::error);
  echo::reference::chain_state<comp::none> none(2, 10);  // holds nothing, reads 0
  CHECK(none.error(1, 3) == 0.0f);
}

TEST_CASE("chain_state: reset() clears the errors and the shape") {
  ECHO_TEST_RNG(rng);
  const int P = 3;
  const size_t n = 1000;
  echo::reference::all_reduce<Q, EF> ar(P);
  echo::reference::chain_state<EF> ch(P, n);
  echo_test::ranks_data<float> d(P, n);
  d.randomize(rng);
  auto out = d.out_ptrs();
  ar(d.in_ptrs(), out, n, &ch);
  ar(d.in_ptrs(), out, n, &ch);
  CHECK(ch.size() == n);
  CHECK(nonzero_errors(ch, n) > 0);
  ch.reset();
  CHECK(ch.size() == 0);
  CHECK(nonzero_errors(ch, n) == 0);

  // a call after reset gives what a call on a fresh chain gives
  echo::reference::chain_state<EF> fresh(P, n);
  echo_test::ranks_data<float> e = d;
  auto eo = e.out_ptrs();
  ar(d.in_ptrs(), out, n, &ch);
  ar(e.in_ptrs(), eo, n, &fresh);
  CHECK(echo_test::same_bytes(d.out[0], e.out[0]));
  for (int r = 0; r < P; ++r)
    for (size_t k = 0; k < n; ++k) REQUIRE(echo_test::same_bits(ch.error(r, k), fresh.error(r, k)));
}

TEST_CASE("chain_state: a call with a different n starts a new chain; the same n continues it") {
  ECHO_TEST_RNG(rng);
  const int P = 4;
  const size_t cap = 4097;
  echo::reference::all_reduce<Q, EF> ar(P);
  echo::reference::chain_state<EF> ch(P, cap), fresh(P, cap);
  for (size_t n1 : {size_t(4097), size_t(1000)}) {
    const size_t n2 = n1 == 4097 ? 127 : 1001;
    CAPTURE(n1);
    CAPTURE(n2);
    ch.reset();
    fresh.reset();
    echo_test::ranks_data<float> a(P, n1), b(P, n2), b2(P, n2);
    a.randomize(rng);
    b.randomize(rng);
    b2 = b;
    auto ao = a.out_ptrs(), bo = b.out_ptrs(), b2o = b2.out_ptrs();
    ar(a.in_ptrs(), ao, n1, &ch);
    ar(a.in_ptrs(), ao, n1, &ch);
    CHECK(ch.size() == n1);
    ar(b.in_ptrs(), bo, n2, &ch);  // shape change: as if on a fresh chain
    ar(b2.in_ptrs(), b2o, n2, &fresh);
    CHECK(ch.size() == n2);
    for (int r = 0; r < P; ++r) CHECK(echo_test::same_bytes(b.out[r], b2.out[r]));
    for (int r = 0; r < P; ++r)
      for (size_t k = 0; k < cap; ++k) REQUIRE(echo_test::same_bits(ch.error(r, k), fresh.error(r, k)));
    // the same n again: the stored errors are added, so the result differs from a fresh chain's
    echo::reference::chain_state<EF> fresh2(P, cap);
    ar(b.in_ptrs(), bo, n2, &ch);
    ar(b2.in_ptrs(), b2o, n2, &fresh2);
    CHECK(ch.size() == n2);
    CHECK_FALSE(echo_test::same_bytes(b.out[0], b2.out[0]));
  }
}

TEST_CASE("chain_state: n above the capacity throws echo::error naming the call and leaves the chain untouched") {
  ECHO_TEST_RNG(rng);
  const int P = 2;
  echo::reference::all_reduce<Q, EF> ar(P);
  echo::reference::chain_state<EF> ch(P, 100);
  echo_test::ranks_data<float> d(P, 101);
  d.randomize(rng);
  auto out = d.out_ptrs();
  ar(d.in_ptrs(), out, 100, &ch);
  std::vector<float> before;
  for (int r = 0; r < P; ++r)
    for (size_t k = 0; k < 100; ++k) before.push_back(ch.error(r, k));
  REQUIRE(nonzero_errors(ch, 100) > 0);
  bool thrown = false;
  try {
    ar(d.in_ptrs(), out, 101, &ch);
  } catch (const echo::error& e) {
    thrown = true;
    CHECK(e.call() == "echo::reference::all_reduce");
    const std::string what = e.what();
    CHECK(what.find("echo::reference::all_reduce") != std::string::npos);
    CHECK(what.find("capacity") != std::string::npos);
    CHECK(what.find("101") != std::string::npos);
  }
  CHECK(thrown);
  // Regression: a rejected call once reset the chain before failing. It must leave it untouched.
  CHECK(ch.size() == 100);
  for (int r = 0; r < P; ++r)
    for (size_t k = 0; k < 100; ++k) REQUIRE(echo_test::same_bits(ch.error(r, k), before[r * 100 + k]));
  CHECK_NOTHROW(ar(d.in_ptrs(), out, 100, &ch));
  CHECK_THROWS_AS(ch.begin_call(101), echo::error);
}
