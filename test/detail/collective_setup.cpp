// detail/collective_setup.cuh: a constructor step that fails on some ranks makes every rank
// throw at the next exchange, and no rank waits for one that gave up. Host code over
// communicator::local's in-process rendezvous (no GPU, no NCCL).
#include <echo/detail/collective_setup.cuh>

#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

namespace {

struct outcome {
  std::string what;        // the echo::error's message, if one was thrown
  bool bad_alloc = false;  // std::bad_alloc was thrown
  int steps_run = 0;       // local steps that ran
  std::vector<int> got;    // what the exchange returned, if it returned
};

/// P in-process ranks whose exchanges give up after 5 s (a broken implementation fails fast).
std::vector<echo::communicator> comms_of(int P) {
  auto rv = std::make_shared<echo::detail::local_rendezvous>(P, std::chrono::milliseconds(5000));
  std::vector<echo::communicator> out;
  for (int r = 0; r < P; ++r)
    out.emplace_back(r, P, 0, [rv, r](const void* s, void* d, size_t b) { rv->all_gather(r, s, d, b); });
  return out;
}

/// One thread a rank: step 1 (fails on the ranks in fail_at_1), an exchange of rank * 10, step 2
/// (fails on the ranks in fail_at_2), agree().
std::vector<outcome> run(const std::vector<echo::communicator>& comms, const std::vector<int>& fail_at_1,
                         const std::vector<int>& fail_at_2, bool alloc = false) {
  const int P = static_cast<int>(comms.size());
  std::vector<outcome> out(static_cast<size_t>(P));
  std::vector<std::thread> ts;
  const auto in = [](const std::vector<int>& v, int r) {
    for (int x : v)
      if (x == r) return true;
    return false;
  };
  for (int r = 0; r < P; ++r)
    ts.emplace_back([&, r] {
      outcome& o = out[static_cast<size_t>(r)];
      try {
        echo::detail::collective_setup setup(comms[static_cast<size_t>(r)], "test setup");
        setup.local([&] {
          ++o.steps_run;
          if (in(fail_at_1, r)) {
            if (alloc) throw std::bad_alloc();
            throw echo::error("step 1", "refused on rank " + std::to_string(r), __FILE__, __LINE__);
          }
        });
        setup.local([&] { ++o.steps_run; });  // skipped after a failure
        o.got = setup.all_gather(r * 10);
        setup.local([&] {
          ++o.steps_run;
          if (in(fail_at_2, r)) throw echo::error("step 2", "refused on rank " + std::to_string(r), __FILE__, __LINE__);
        });
        setup.agree();
      } catch (const echo::error& e) {
        o.what = e.what();
      } catch (const std::bad_alloc&) {
        o.bad_alloc = true;
      }
    });
  for (auto& t : ts) t.join();
  return out;
}

bool has(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }

}  // namespace

TEST_CASE("collective_setup: no failure, every rank gets every value and throws nothing") {
  for (int P : {1, 2, 3, 8}) {
    const auto out = run(comms_of(P), {}, {});
    for (int r = 0; r < P; ++r) {
      const outcome& o = out[static_cast<size_t>(r)];
      CHECK(o.what.empty());
      CHECK(o.steps_run == 3);
      REQUIRE(o.got.size() == static_cast<size_t>(P));
      for (int q = 0; q < P; ++q) CHECK(o.got[static_cast<size_t>(q)] == q * 10);
    }
  }
}

TEST_CASE("collective_setup: one rank's failure before an exchange: every rank throws there, the failing rank its own error") {
  const auto comms = comms_of(4);
  const auto t0 = std::chrono::steady_clock::now();
  const auto out = run(comms, {2}, {});
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 4.0);
  for (int r = 0; r < 4; ++r) {
    const outcome& o = out[static_cast<size_t>(r)];
    CAPTURE(r);
    CAPTURE(o.what);
    CHECK(o.got.empty());  // the exchange threw
    if (r == 2) {
      CHECK(has(o.what, "refused on rank 2"));
      CHECK(o.steps_run == 1);  // the step after the failure was skipped
    } else {
      CHECK(has(o.what, "test setup: rank 2 failed to set up"));
      CHECK(o.steps_run == 2);
    }
  }
  for (const outcome& o : run(comms, {}, {})) {  // the ranks' exchanges are still aligned
    CHECK(o.what.empty());
    CHECK(o.got == (std::vector<int>{0, 10, 20, 30}));
  }
}

TEST_CASE("collective_setup: failures after the last exchange reach every rank at agree(); the first failing rank is named") {
  const auto out = run(comms_of(3), {}, {1, 2});
  for (int r = 0; r < 3; ++r) {
    const outcome& o = out[static_cast<size_t>(r)];
    CAPTURE(r);
    CHECK(o.got.size() == 3u);  // the exchange itself went through
    if (r == 0) CHECK(has(o.what, "rank 1 failed to set up"));
    else CHECK(has(o.what, "refused on rank " + std::to_string(r)));
  }
}

TEST_CASE("collective_setup: a failing rank rethrows its own exception type") {
  const auto out = run(comms_of(2), {0}, {}, true);
  CHECK(out[0].bad_alloc);
  CHECK(has(out[1].what, "rank 0 failed to set up"));
}

TEST_CASE("collective_setup: every rank failing: each throws its own error, none waits") {
  const auto out = run(comms_of(3), {0, 1, 2}, {});
  for (int r = 0; r < 3; ++r) CHECK(has(out[static_cast<size_t>(r)].what, "refused on rank " + std::to_string(r)));
}
