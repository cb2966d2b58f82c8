// communicator.cuh's host-only part: the in-process rendezvous behind communicator::local().
#include <echo/communicator.cuh>

#include <doctest/doctest.h>

#include <array>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

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

TEST_CASE("a communicator of 16 ranks (more than a node's GPUs): built and exchanging, for transport::nccl") {
  // The communicator has no rank limit of its own: transport::nccl spans nodes, and only cuda_ipc
  // (the GPUs of one node) limits P, when an object is built (test/collective/faults.cu).
  constexpr int P = 16;
  auto rv = std::make_shared<echo::detail::local_rendezvous>(P, std::chrono::milliseconds(20000));
  std::vector<echo::communicator> comms;
  for (int r = 0; r < P; ++r)
    comms.emplace_back(r, P, r, [rv, r](const void* s, void* d, size_t b) { rv->all_gather(r, s, d, b); });
  std::vector<std::vector<int>> got(P);
  std::vector<std::thread> ts;
  for (int r = 0; r < P; ++r)
    ts.emplace_back([&, r] {
      for (int k = 0; k < 5; ++k) got[static_cast<size_t>(r)] = comms[static_cast<size_t>(r)].all_gather(100 * k + r);
    });
  for (auto& t : ts) t.join();
  for (int r = 0; r < P; ++r) {
    CHECK(comms[static_cast<size_t>(r)].size() == P);
    REQUIRE(got[static_cast<size_t>(r)].size() == static_cast<size_t>(P));
    for (int q = 0; q < P; ++q) CHECK(got[static_cast<size_t>(r)][static_cast<size_t>(q)] == 400 + q);
  }
  CHECK_THROWS_AS(echo::communicator(0, 0, 0, [](const void*, void*, size_t) {}), echo::error);
}
