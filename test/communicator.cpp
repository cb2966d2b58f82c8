// communicator.cuh's host-only part: the in-process rendezvous behind communicator::local().
#include <echo/communicator.cuh>

#include <doctest/doctest.h>

#include <array>
#include <chrono>
#include <thread>

namespace {

/// One all-gather of an int by ranks 0 and 1 of rv, each from its own thread.
std::array<std::array<int, 2>, 2> round_of_two(echo::detail::local_rendezvous& rv, int v0, int v1) {
  std::array<std::array<int, 2>, 2> got{};
  bool threw = false;
  std::thread t([&] {
    try {
      rv.all_gather(1, &v1, got[1].data(), sizeof(int));
    } catch (const echo::error&) {
      threw = true;
    }
  });
  rv.all_gather(0, &v0, got[0].data(), sizeof(int));
  t.join();
  REQUIRE_FALSE(threw);
  return got;
}

}  // namespace

TEST_CASE("local rendezvous: every rank gets every rank's bytes, round after round") {
  echo::detail::local_rendezvous rv(2, std::chrono::milliseconds(5000));
  for (int k = 0; k < 50; ++k) {
    const auto got = round_of_two(rv, 2 * k, 2 * k + 1);
    for (const auto& g : got) CHECK(g == (std::array<int, 2>{2 * k, 2 * k + 1}));
  }
}

TEST_CASE("local rendezvous: a round that a rank gave up on leaves nothing behind") {
  // Before: the rank's arrival and bytes stayed, so the next round completed early with its stale
  // bytes, and the round after it found the rendezvous stuck.
  echo::detail::local_rendezvous rv(2, std::chrono::milliseconds(200));
  int stale = 11;
  std::array<int, 2> ignored{};
  CHECK_THROWS_AS(rv.all_gather(1, &stale, ignored.data(), sizeof(int)), echo::error);  // rank 0 never came
  for (int k = 0; k < 3; ++k) {
    const auto got = round_of_two(rv, 20 + k, 30 + k);
    for (const auto& g : got) CHECK(g == (std::array<int, 2>{20 + k, 30 + k}));
  }
}
