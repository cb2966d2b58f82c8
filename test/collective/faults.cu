// The fault matrix (docs/fault-matrix.md): every bad input and misuse gets a clear status or
// exception, or a defined result, and never a hang or wrong data reported as success.
#include "support/gpu_harness.cuh"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace echo_test;
using za4 = echo::quant::zero_aware<4, 128>;
using ef8 = echo::comp::error_feedback<echo::comp::int8_state>;
using ef16 = echo::comp::error_feedback<echo::bfloat16_t>;
using bf16 = echo::bfloat16_t;
using st = echo::status;

namespace {

bool contains(const char* s, const char* what) { return std::string(s).find(what) != std::string::npos; }

/// Every rank's check() after synchronising its stream.
template <class RC>
std::vector<st> checks(RC& rc) {
  std::vector<st> s;
  for (int r = 0; r < rc.ranks(); ++r) {
    cudaSetDevice(rc.in(r).device);
    cudaStreamSynchronize(rc.stream(r));
    s.push_back(rc.ar(r).check());
  }
  return s;
}

}  // namespace

TEST_CASE("stale flags: a large call, then a small one, 20 times (the reproducer of FINDINGS.md)") {
  // One long-lived object; the large call uses other tiles a flag than the small one, so the two
  // layouts differ. Before the fixed workspace layout, about half of the checked calls were
  // wrong at whole warp tiles.
  const size_t big = 41943040, small = 1060921;
  reference_check<za4, echo::comp::none, bf16> rc(big);
  rc.upload_random(big);  // the large calls are not checked: any input will do
  for (int k = 0; k < 20; ++k) {
    rc.launch(big);
    for (int r = 0; r < rc.ranks(); ++r) {
      cudaSetDevice(rc.in(r).device);
      ECHO_TEST_CUDA(cudaStreamSynchronize(rc.stream(r)));
    }
    rc.step(small);
  }
}

TEST_CASE("ranks that call with different n fail with status::mismatch on every rank, without waiting for the spin limit") {
  echo::all_reduce_options opt;
  opt.spin_limit_seconds = 30;  // a mismatch must not wait for this
  struct sizes {
    size_t n0, n1;
    size_t unquantized_below;
  };
  // pipeline vs pipeline; one-shot vs pipeline (different paths, same flag words)
  for (const sizes c : {sizes{300000, 300128, 0}, sizes{1000, 600000, 1 << 20}, sizes{5000, 4999, 1 << 20}}) {
    CAPTURE(c.n0);
    CAPTURE(c.n1);
    opt.unquantized_below_bytes = c.unquantized_below;
    reference_check<za4, echo::comp::none, bf16> rc(600000, opt);
    rc.upload_random(600000);
    const auto t0 = std::chrono::steady_clock::now();
    rc.pool().run([&](int r) {
      const size_t n = r == 0 ? c.n0 : c.n1;
      REQUIRE(rc.ar(r)(rc.in(r).ptr, rc.out(r).ptr, n, rc.stream(r)) == st::success);
    });
    for (st s : checks(rc)) CHECK(s == st::mismatch);
    CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 10.0);
    CHECK(rc.ar(0)(rc.in(0).ptr, rc.out(0).ptr, 1000, rc.stream(0)) == st::poisoned);
  }
}

TEST_CASE("ranks that call with different element types fail with status::mismatch") {
  reference_check<za4, ef8, bf16> rc(100000);
  rc.step(100000);
  rc.pool().run([&](int r) {
    const echo::dtype t = r == 0 ? echo::dtype::bf16 : echo::dtype::f16;
    REQUIRE(rc.ar(r)(t, rc.in(r).ptr, rc.out(r).ptr, 50000, rc.stream(r), rc.chain(r)) == st::success);
  });
  for (st s : checks(rc)) CHECK(s == st::mismatch);
}

TEST_CASE("ranks built with different configurations: the constructor throws on every rank") {
  auto& comms = local_comms();
  CHECK_THROWS_AS(echo::for_each_rank(comms,
                                      [&](const echo::communicator& c) {
                                        if (c.rank() == 0) echo::all_reduce<za4> a(c, 1000);
                                        else echo::all_reduce<echo::quant::symmetric<4, 128>> b(c, 1000);
                                      }),
                  echo::error);
  CHECK_THROWS_AS(echo::for_each_rank(comms, [&](const echo::communicator& c) { echo::all_reduce<za4> a(c, 1000 + c.rank()); }),
                  echo::error);
  // An option given on one rank and left to the dispatch table on another differs too, though the
  // table may hold the same size; the tiers are the cuda_ipc engine's to compare.
  const auto one_rank = [&](auto set) {
    echo::for_each_rank(comms, [&](const echo::communicator& c) {
      echo::all_reduce_options opt;
      if (c.rank() == 0) set(opt);
      echo::all_reduce<za4> a(c, 1000, opt);
    });
  };
  CHECK_THROWS_AS(one_rank([](echo::all_reduce_options& o) { o.unquantized_below_bytes = 0; }), echo::error);
  CHECK_THROWS_AS(one_rank([](echo::all_reduce_options& o) { o.wide_policy_from_bytes = echo::tuning::never; }), echo::error);
  CHECK_THROWS_AS(one_rank([](echo::all_reduce_options& o) { o.mid_policy_from_bytes = 1 << 20; }), echo::error);
  // and a good construction afterwards still works
  reference_check<za4, echo::comp::none, bf16> rc(5000);
  rc.step(5000);
}

TEST_CASE("bad options throw at construction: spin limit <= 0, NaN, above a day; a negative size converted") {
  // Every rank constructs (the constructor is collective: arguments are judged on every rank and
  // thrown after the configuration exchange, so that no rank is left waiting in it).
  auto& comms = local_comms();
  auto build = [&](const echo::all_reduce_options& opt) {
    echo::for_each_rank(comms, [&](const echo::communicator& c) { echo::all_reduce<za4> a(c, 1000, opt); });
  };
  for (double limit : {0.0, -1.0, static_cast<double>(NAN), 1e9}) {
    echo::all_reduce_options opt;
    opt.spin_limit_seconds = limit;
    CHECK_THROWS_AS(build(opt), echo::error);
  }
  echo::all_reduce_options opt;
  opt.unquantized_below_bytes = static_cast<size_t>(-1);  // what "= -1" (the old "the table's") now stores
  CHECK_THROWS_AS(build(opt), echo::error);
}

TEST_CASE("one object called on two streams at once: the calls are ordered, both right") {
  reference_check<za4, echo::comp::none, bf16> rc(200000);
  const int P = rc.ranks();
  std::vector<cudaStream_t> other(P);
  std::vector<device_buffer<bf16>> in2, out2;
  for (int r = 0; r < P; ++r) {
    cudaSetDevice(rc.in(r).device);
    ECHO_TEST_CUDA(cudaStreamCreateWithFlags(&other[r], cudaStreamNonBlocking));
    in2.emplace_back(rc.in(r).device, 200000);
    out2.emplace_back(rc.in(r).device, 200000);
  }
  for (int k = 0; k < 5; ++k) {
    const auto a = rc.upload_random(200000);
    std::vector<std::vector<bf16>> b(P);
    for (int r = 0; r < P; ++r) in2[r].upload(b[r] = random_elements<bf16>(rc.random(), 150000));
    rc.pool().run([&](int r) {
      REQUIRE(rc.ar(r)(rc.in(r).ptr, rc.out(r).ptr, 200000, rc.stream(r)) == st::success);
      REQUIRE(rc.ar(r)(in2[r].ptr, out2[r].ptr, 150000, other[r]) == st::success);  // no wait in between
    });
    for (int r = 0; r < P; ++r) {
      cudaSetDevice(rc.in(r).device);
      ECHO_TEST_CUDA(cudaStreamSynchronize(other[r]));
    }
    rc.finish(a, 200000);
    std::vector<std::vector<bf16>> want(P, std::vector<bf16>(150000));
    std::vector<const bf16*> ri;
    std::vector<bf16*> ro;
    for (int r = 0; r < P; ++r) ri.push_back(b[r].data()), ro.push_back(want[r].data());
    const echo::reference::all_reduce<za4> ref(P);
    ref(ri, ro, 150000);
    for (int r = 0; r < P; ++r) CHECK(first_mismatch(out2[r].download(150000), want[r]) == -1);
  }
  for (int r = 0; r < P; ++r) cudaStreamDestroy(other[r]);
}

TEST_CASE("bad buffers are refused before any launch, and the object and its chain stay intact") {
  reference_check<za4, ef8, bf16> rc(10000);
  rc.step(10000);
  auto& ar = rc.ar(0);
  cudaSetDevice(rc.in(0).device);
  bf16* in = rc.in(0).ptr;
  cudaStream_t s = rc.stream(0);
  // overlapping but not equal
  CHECK(ar(in, in + 8, 1000, s, rc.chain(0)) == st::invalid_argument);
  CHECK(contains(ar.last_error(), "overlap"));
  // pageable host memory; a chain in pinned host memory (in and out may be pinned: below)
  auto* host = static_cast<bf16*>(std::aligned_alloc(16, 10000 * sizeof(bf16)));
  CHECK(ar(host, rc.out(0).ptr, 1000, s, rc.chain(0)) == st::invalid_argument);
  CHECK(contains(ar.last_error(), "in: neither device memory"));
  CHECK(ar(in, host, 1000, s, rc.chain(0)) == st::invalid_argument);
  CHECK(contains(ar.last_error(), "out: neither device memory"));
  std::free(host);
  unsigned char* pinned = nullptr;
  const size_t state_bytes = echo::chain_view<ef8>::bytes_for(1000);
  ECHO_TEST_CUDA(cudaMallocHost(&pinned, state_bytes));
  CHECK(ar(in, rc.out(0).ptr, 1000, s, echo::chain_view<ef8>(pinned, state_bytes, rc.in(0).device)) == st::invalid_argument);
  CHECK(contains(ar.last_error(), "chain: not device memory"));
  cudaFreeHost(pinned);
  // another GPU's memory
  if (gpu_count() > 1 && rc.ranks() > 1 && rc.in(1).device != rc.in(0).device) {
    CHECK(ar(rc.in(1).ptr, rc.out(0).ptr, 1000, s, rc.chain(0)) == st::invalid_argument);
  }
  // the chain: moved-from, too small, overlapping the input
  echo::chain<ef8> moved(10000);
  echo::chain<ef8> taker(std::move(moved));
  CHECK(moved.capacity() == 0);
  CHECK(ar(in, rc.out(0).ptr, 1000, s, &moved) == st::invalid_argument);
  CHECK(contains(ar.last_error(), "chain"));
  echo::chain_view<ef8> onto_input(in, echo::chain_view<ef8>::bytes_for(1000), rc.in(0).device);
  CHECK(ar(in, rc.out(0).ptr, 1000, s, onto_input) == st::invalid_argument);
  CHECK(contains(ar.last_error(), "chain: state overlaps"));
  CHECK(cudaGetLastError() == cudaSuccess);
  for (int k = 0; k < 2; ++k) rc.step(10000);  // nothing was launched, nothing was touched
}

TEST_CASE("deferred-update misuse: reported for an echo::chain, a defined fresh chain for a chain_view") {
  reference_check<za4, ef8, bf16> rc(50000);
  rc.step(50000);
  const int P = rc.ranks();
  // update() after a fused call: refused, state untouched
  rc.pool().run([&](int r) { CHECK(rc.ar(r).update(rc.in(r).ptr, 50000, rc.stream(r), *rc.chain(r)) == st::invalid_argument); });
  rc.step(50000);
  // a deferred call whose update() never ran: the next call is refused until it does
  rc.step(50000, false, echo::state_update::deferred);
  {
    const auto x = rc.upload_random(50000);
    rc.pool().run([&](int r) {
      REQUIRE(rc.ar(r)(rc.in(r).ptr, rc.out(r).ptr, 50000, rc.stream(r), rc.chain(r), echo::state_update::deferred) == st::success);
    });
    rc.pool().run([&](int r) {
      CHECK(rc.ar(r)(rc.in(r).ptr, rc.out(r).ptr, 50000, rc.stream(r), rc.chain(r)) == st::invalid_argument);
      CHECK(contains(rc.ar(r).last_error(), "update()"));
      CHECK(rc.ar(r).update(rc.in(r).ptr, 50000, rc.stream(r), *rc.chain(r)) == st::success);
    });
    rc.finish(x, 50000);
  }
  rc.step(50000);
  // chain_view (caller memory, no host bookkeeping): the device sees the pending update in the
  // header and starts the next call from a fresh chain, a defined result
  std::vector<device_buffer<unsigned char>> mem;
  std::vector<echo::chain_view<ef8>> views;
  const size_t bytes = echo::chain_view<ef8>::bytes_for(50000);
  for (int r = 0; r < P; ++r) {
    mem.emplace_back(rc.in(r).device, bytes);
    ECHO_TEST_CUDA(cudaMemset(mem[r].ptr, 0, bytes));
    views.emplace_back(mem[r].ptr, bytes, rc.in(r).device);
  }
  echo::reference::all_reduce<za4, ef8> ref(P);
  echo::reference::chain_state<ef8> ref_chain(P, 50000);
  for (int k = 0; k < 3; ++k) {
    const bool skip_update = k == 1;
    const auto x = rc.upload_random(50000);
    rc.pool().run([&](int r) {
      REQUIRE(rc.ar(r)(rc.in(r).ptr, rc.out(r).ptr, 50000, rc.stream(r), views[r], echo::state_update::deferred) == st::success);
      if (!skip_update) REQUIRE(rc.ar(r).update(rc.in(r).ptr, 50000, rc.stream(r), views[r]) == st::success);
    });
    for (st s : checks(rc)) REQUIRE(s == st::success);
    if (k == 2) ref_chain.reset();  // the call after the skipped update starts fresh
    std::vector<std::vector<bf16>> want(P, std::vector<bf16>(50000));
    std::vector<const bf16*> ri;
    std::vector<bf16*> ro;
    for (int r = 0; r < P; ++r) ri.push_back(x[r].data()), ro.push_back(want[r].data());
    ref(ri, ro, 50000, &ref_chain);
    for (int r = 0; r < P; ++r) CHECK(first_mismatch(rc.out(r).download(50000), want[r]) == -1);
  }
}

TEST_CASE("graph capture as the first call of a fresh chain and right after a shape change: replays equal direct calls") {
  const size_t n1 = 65537, n2 = 40000;
  reference_check<za4, ef16, bf16> rc(n1);
  const int P = rc.ranks();
  for (int phase = 0; phase < 2; ++phase) {
    const size_t n = phase == 0 ? n1 : n2;  // phase 0: the chain is fresh; phase 1: its n changes
    std::vector<cudaGraphExec_t> execs(P);
    for (int r = 0; r < P; ++r) {
      ECHO_TEST_CUDA(cudaSetDevice(rc.in(r).device));
      cudaGraph_t g;
      ECHO_TEST_CUDA(cudaStreamBeginCapture(rc.stream(r), cudaStreamCaptureModeThreadLocal));
      const st s = rc.ar(r)(rc.in(r).ptr, rc.out(r).ptr, n, rc.stream(r), rc.chain(r));
      ECHO_TEST_CUDA(cudaStreamEndCapture(rc.stream(r), &g));
      REQUIRE(s == st::success);
      ECHO_TEST_CUDA(cudaGraphInstantiate(&execs[r], g, 0));
      ECHO_TEST_CUDA(cudaGraphDestroy(g));
    }
    for (int it = 0; it < 6; ++it) {  // the reference chain: a fresh start (or reset by n), then a chain
      const auto x = rc.upload_random(n);
      for (int r = 0; r < P; ++r) {
        ECHO_TEST_CUDA(cudaSetDevice(rc.in(r).device));
        ECHO_TEST_CUDA(cudaGraphLaunch(execs[r], rc.stream(r)));
      }
      rc.finish(x, n);
    }
    for (int r = 0; r < P; ++r) {
      cudaSetDevice(rc.in(r).device);
      cudaGraphExecDestroy(execs[r]);
    }
  }
}

TEST_CASE("construction leaves the calling thread on the device it was on") {
  auto& comms = local_comms();
  const int gpus = gpu_count();
  echo::for_each_rank(comms, [&](const echo::communicator& c) {
    const int other = (c.device() + 1) % gpus;
    cudaSetDevice(other);
    echo::all_reduce<za4, echo::transport::cuda_ipc::tag, ef8> ar(c, 1000);
    int now = -1;
    cudaGetDevice(&now);
    CHECK(now == other);
  });
}

TEST_CASE("a NaN or Inf propagates to its group's output for one call; the chain forgets it") {
  const size_t n = 10007;
  reference_check<za4, ef8, bf16> rc(n);
  for (int k = 0; k < 3; ++k) {
    auto x = rc.upload_random(n);
    if (k == 0) {
      x[0][300] = narrow<bf16>(INFINITY);
      rc.in(0).upload(x[0]);
    }
    rc.launch(n);
    rc.finish(x, n);
  }
}

namespace {

/// Set every rank's launch epoch (sync_words::epoch) as if that many launches had run; no call
/// may be in flight.
template <class RC>
void set_epochs(RC& rc, uint64_t epoch) {
  for (int r = 0; r < rc.ranks(); ++r) {
    ECHO_TEST_CUDA(cudaSetDevice(rc.in(r).device));
    ECHO_TEST_CUDA(cudaStreamSynchronize(rc.stream(r)));
    unsigned char* w = rc.ar(r).engine().workspace();
    REQUIRE(w != nullptr);
    ECHO_TEST_CUDA(echo::detail::write_device_now(w + 4 * echo::transport::cuda_ipc::sync_words::epoch, &epoch, sizeof epoch));
  }
}

}  // namespace

TEST_CASE("epochs past 2^31 and 2^32: a flag no launch wrote for that long is never taken as reached") {
  // Flags once held a 32-bit epoch compared wrap-around: a flag last written 2^31 launches ago
  // read as a later epoch, and the first large call after many small ones consumed ring slots
  // its peer had not written (success, wrong data). Here the small calls use tile 0 only; the
  // large call's other tiles' flags were last written just before the jump.
  const size_t big = size_t(1) << 21, small = 1024;
  for (const uint64_t jump : {(uint64_t(1) << 31) - 10, (uint64_t(1) << 32) - 10, (uint64_t(1) << 40) + 7}) {
    CAPTURE(jump);
    reference_check<za4, ef8, bf16> rc(big);
    rc.step(big);  // every tile's flags at epoch 1
    set_epochs(rc, jump);
    for (int k = 0; k < 20; ++k) rc.step(small);
    for (int k = 0; k < 3; ++k) rc.step(big);
  }
}

TEST_CASE("an error the caller's thread left behind does not fail (or poison) a call that ran") {
  const size_t n = size_t(1) << 20;
  reference_check<za4, ef8, bf16> rc(n);
  rc.step(n);  // the buffers' pointers are checked (and remembered) here
  for (const auto mode : {echo::state_update::fused, echo::state_update::deferred}) {
    const auto x = rc.upload_random(n);
    std::vector<st> s(static_cast<size_t>(rc.ranks())), u(static_cast<size_t>(rc.ranks()), st::success);
    auto stale_error = [&](int r) {
      if (r != 0) return;
      int d = 0;
      cudaGetDevice(&d);
      (void)cudaSetDevice(-1);  // cudaErrorInvalidDevice, not sticky: it waits in cudaGetLastError()
      cudaSetDevice(d);
    };
    rc.pool().run([&](int r) {
      stale_error(r);
      s[r] = rc.ar(r)(rc.in(r).ptr, rc.out(r).ptr, n, rc.stream(r), rc.chain(r), mode);
    });
    if (mode == echo::state_update::deferred)
      rc.pool().run([&](int r) {
        stale_error(r);
        u[r] = rc.ar(r).update(rc.in(r).ptr, n, rc.stream(r), *rc.chain(r));
      });
    for (int r = 0; r < rc.ranks(); ++r) {
      CHECK_MESSAGE(s[r] == st::success, echo::to_string(s[r]), " (", rc.ar(r).last_error(), ")");
      CHECK(u[r] == st::success);
    }
    rc.pool().run([&](int r) { (void)cudaGetLastError(); });  // the caller's own error, theirs to clear
    rc.finish(x, n);
    rc.step(n);  // the next call, on the same chain, continues it
  }
}

TEST_CASE("a call that timed out leaves its chain fresh, not half-written and continued") {
  // With ranks on separate GPUs and a small workspace the call runs as several launches (rounds);
  // a round that gives up used to leave the tag of the call before, so the chain continued with
  // the failed call's partial errors. (Ranks sharing a GPU run one launch: the tag is checked too.)
  echo::all_reduce_options opt;
  opt.spin_limit_seconds = 0.5;
  opt.workspace_bytes = size_t(1) << 20;
  const size_t n = size_t(1) << 22;
  reference_check<za4, ef8, bf16> rc(n, opt);
  rc.step(n);
  auto tag_of = [&](int r) {
    uint64_t tag = ~uint64_t(0);
    ECHO_TEST_CUDA(cudaSetDevice(rc.in(r).device));
    ECHO_TEST_CUDA(cudaMemcpy(&tag, rc.chain(r)->view().data(), sizeof tag, cudaMemcpyDeviceToHost));
    return tag;
  };
  CHECK(tag_of(0) == n);
  ECHO_TEST_CUDA(cudaSetDevice(rc.in(0).device));
  REQUIRE(rc.ar(0)(rc.in(0).ptr, rc.out(0).ptr, n, rc.stream(0), rc.chain(0)) == st::success);  // rank 0 alone
  ECHO_TEST_CUDA(cudaStreamSynchronize(rc.stream(0)));
  CHECK(rc.ar(0).check() == st::timeout);
  CHECK(tag_of(0) == 0);
}

TEST_CASE("one rank's bad constructor argument: every rank throws, none waits for the others") {
  auto& comms = local_comms();
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(echo::for_each_rank(comms, [&](const echo::communicator& c) { echo::all_reduce<za4> a(c, c.rank() == 0 ? 0 : 1000); }),
                  echo::error);
  echo::all_reduce_options bad;
  bad.spin_limit_seconds = -1;
  CHECK_THROWS_AS(echo::for_each_rank(comms,
                                      [&](const echo::communicator& c) {
                                        echo::all_reduce<za4> a(c, 1000, c.rank() == 0 ? bad : echo::all_reduce_options{});
                                      }),
                  echo::error);
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 10.0);
  reference_check<za4, echo::comp::none, bf16> rc(5000);  // and the communicators still work
  rc.step(5000);
}

TEST_CASE("ranks whose workspace allocation is refused: every rank throws, none waits, nothing leaks") {
  // Before (2026-12-01) a refused rank threw alone and its peers waited in the buffer's exchange
  // (the local communicator's 120 s here; forever through a user callback or NCCL), and a rank
  // that had allocated its workspace kept it.
  auto& comms = local_comms();
  if (comms.size() < 2) {
    MESSAGE("SKIPPED here: needs two ranks");
    return;
  }
  echo::all_reduce_options opt;
  opt.workspace_bytes = size_t(4) << 30;
  // the workspace follows max_elements: 2^28 values make it large against the rest of a build
  check_some_ranks_refused<echo::all_reduce<za4>>(comms, size_t(1) << 28, opt);
  reference_check<za4, echo::comp::none, bf16> rc(5000);  // and the communicators still work
  rc.step(5000);
}

TEST_CASE("update() of another n or element type than its deferred call is refused, and the update stays due") {
  const size_t n = 4099;  // a tail group
  reference_check<za4, ef16, bf16> rc(n);
  rc.step(n);
  {
    const auto x = rc.upload_random(n);
    rc.pool().run([&](int r) {
      REQUIRE(rc.ar(r)(rc.in(r).ptr, rc.out(r).ptr, n, rc.stream(r), rc.chain(r), echo::state_update::deferred) == st::success);
    });
    rc.pool().run([&](int r) {
      auto& ar = rc.ar(r);
      CHECK(ar.update(rc.in(r).ptr, n - 1, rc.stream(r), *rc.chain(r)) == st::invalid_argument);
      CHECK(contains(ar.last_error(), "n: not the n"));
      CHECK(ar.update(reinterpret_cast<const float*>(rc.in(r).ptr), n, rc.stream(r), *rc.chain(r)) == st::invalid_argument);
      CHECK(contains(ar.last_error(), "element type"));
      CHECK(rc.chain(r)->update_pending());
      CHECK(ar.update(rc.in(r).ptr, n, rc.stream(r), *rc.chain(r)) == st::success);
      CHECK(!rc.chain(r)->update_pending());
    });
    rc.finish(x, n);
  }
  for (int k = 0; k < 3; ++k) rc.step(n);  // the chain continues as the reference's

  // chain_view: the device finds no update due for another n or type and changes nothing; the
  // right one then completes the deferred call
  const int P = rc.ranks();
  std::vector<device_buffer<unsigned char>> mem;
  std::vector<echo::chain_view<ef16>> views;
  const size_t bytes = echo::chain_view<ef16>::bytes_for(n);
  for (int r = 0; r < P; ++r) {
    mem.emplace_back(rc.in(r).device, bytes);
    ECHO_TEST_CUDA(cudaMemset(mem[r].ptr, 0, bytes));
    views.emplace_back(mem[r].ptr, bytes, rc.in(r).device);
  }
  echo::reference::all_reduce<za4, ef16> ref(P);
  echo::reference::chain_state<ef16> ref_chain(P, n);
  for (int k = 0; k < 4; ++k) {
    const auto x = rc.upload_random(n);
    rc.pool().run([&](int r) {
      REQUIRE(rc.ar(r)(rc.in(r).ptr, rc.out(r).ptr, n, rc.stream(r), views[r], echo::state_update::deferred) == st::success);
    });
    rc.pool().run([&](int r) {
      auto& ar = rc.ar(r);
      REQUIRE(ar.update(rc.in(r).ptr, n - 1, rc.stream(r), views[r]) == st::success);
      REQUIRE(ar.update(reinterpret_cast<const float*>(rc.in(r).ptr), n / 2, rc.stream(r), views[r]) == st::success);
      REQUIRE(ar.update(reinterpret_cast<const echo::half_t*>(rc.in(r).ptr), n, rc.stream(r), views[r]) == st::success);
      REQUIRE(ar.update(rc.in(r).ptr, n, rc.stream(r), views[r]) == st::success);
    });
    for (st s : checks(rc)) REQUIRE(s == st::success);
    std::vector<std::vector<bf16>> want(P, std::vector<bf16>(n));
    std::vector<const bf16*> ri;
    std::vector<bf16*> ro;
    for (int r = 0; r < P; ++r) ri.push_back(x[r].data()), ro.push_back(want[r].data());
    ref(ri, ro, n, &ref_chain);
    for (int r = 0; r < P; ++r) CHECK(first_mismatch(rc.out(r).download(n), want[r]) == -1);
  }
}

TEST_CASE("ranks built with error storages that differ only in their bits: the constructor throws on every rank") {
  auto& comms = local_comms();
  using int8s = echo::comp::error_feedback<echo::comp::int8_state>;
  using step8s = echo::comp::error_feedback<echo::comp::step8_state>;  // the same bytes as int8
  using bf16s = echo::comp::error_feedback<echo::bfloat16_t>;
  using halfs = echo::comp::error_feedback<echo::half_t>;  // the same bytes as bf16
  // the mismatches below are the ones that sizes cannot tell apart
  REQUIRE(int8s::state_bytes(1000) == step8s::state_bytes(1000));
  REQUIRE(bf16s::state_bytes(1000) == halfs::state_bytes(1000));
  std::vector<std::string> what(comms.size());
  auto mixed = [&](auto first, auto other) {
    using A = echo::all_reduce<za4, echo::transport::cuda_ipc::tag, decltype(first)>;
    using B = echo::all_reduce<za4, echo::transport::cuda_ipc::tag, decltype(other)>;
    std::fill(what.begin(), what.end(), std::string());
    echo::for_each_rank(comms, [&](const echo::communicator& c) {
      try {
        if (c.rank() == 0) A a(c, 1000);
        else B b(c, 1000);
      } catch (const echo::error& e) {
        what[static_cast<size_t>(c.rank())] = e.what();
      }
    });
    for (const std::string& w : what) {
      INFO(w);
      CHECK(w.find("different quantizer, compensator") != std::string::npos);
    }
  };
  mixed(int8s{}, step8s{});
  mixed(bf16s{}, halfs{});
}

TEST_CASE("cuda_ipc refuses more ranks than one node holds, on every rank and at once") {
  const int P = echo::transport::cuda_ipc::max_ranks + 1;
  auto comms = echo::communicator::local(std::vector<int>(static_cast<size_t>(P), rank_devices(1)[0]), false);
  std::vector<std::string> what(comms.size());
  const auto t0 = std::chrono::steady_clock::now();
  echo::for_each_rank(comms, [&](const echo::communicator& c) {
    try {
      echo::all_reduce<za4> a(c, 1000);
    } catch (const echo::error& e) {
      what[static_cast<size_t>(c.rank())] = e.what();
    }
  });
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 20.0);
  for (const std::string& w : what) {
    INFO(w);
    CHECK(w.find("use transport::nccl") != std::string::npos);
  }
}

TEST_CASE("the workspace follows max_elements: a small object takes little memory, and its largest calls still run") {
  const int P = static_cast<int>(local_comms().size());
  // what a message of max_elements needs at most: both rings of every peer for a segment of fp32
  // values through the 16-bit path, the one-shot halves, the flags (every rank alike)
  const auto need = [P](size_t max_elements) {
    const size_t seg = max_elements / static_cast<size_t>(P) + 4096;
    return 2 * static_cast<size_t>(P) * (seg * 4 + (size_t(1) << 20)) +
           2 * static_cast<size_t>(P) * std::min<size_t>(max_elements * 4, size_t(1) << 20) + (size_t(1) << 20);
  };
  for (const size_t max_elements : {size_t(4096), size_t(1) << 20, size_t(3) << 20}) {
    INFO("max_elements " << max_elements);
    reference_check<za4, ef8, bf16> rc(max_elements);
    CHECK(rc.ar(0).workspace_bytes() <= need(max_elements));
    rc.step(max_elements);
    rc.step(max_elements - 3);
    rc.step(max_elements);
  }
  echo::all_reduce_options capped;  // the option still caps it, where ranks have GPUs of their own;
  capped.workspace_bytes = size_t(256) << 10;  // ranks sharing one hold a whole call in one launch
  reference_check<za4, ef8, bf16> rc(size_t(3) << 20, capped);
  const auto& comms = local_comms();
  const bool shared = P > 1 && comms[0].device() == comms[1].device();
  INFO("ranks share a GPU: " << shared);
  CHECK(rc.ar(0).workspace_bytes() < (shared ? need(size_t(3) << 20) : size_t(12) << 20));
  rc.step(size_t(3) << 20);
}

TEST_CASE("pinned host memory serves as in and out") {
  const size_t n = 100003;
  reference_check<za4, echo::comp::none, bf16> rc(n);
  const int P = rc.ranks();
  std::vector<bf16*> pin_in(P), pin_out(P);
  for (int r = 0; r < P; ++r) {
    ECHO_TEST_CUDA(cudaMallocHost(&pin_in[r], n * sizeof(bf16)));
    ECHO_TEST_CUDA(cudaMallocHost(&pin_out[r], n * sizeof(bf16)));
  }
  for (int k = 0; k < 2; ++k) {
    const auto x = rc.upload_random(n);
    for (int r = 0; r < P; ++r) std::memcpy(pin_in[r], x[r].data(), n * sizeof(bf16));
    rc.pool().run([&](int r) {
      // pinned in, device out; then device in, pinned out
      REQUIRE(rc.ar(r)(k == 0 ? pin_in[r] : rc.in(r).ptr, k == 0 ? rc.out(r).ptr : pin_out[r], n, rc.stream(r)) == st::success);
    });
    for (int r = 0; r < P; ++r) {
      ECHO_TEST_CUDA(cudaStreamSynchronize(rc.stream(r)));
      if (k == 1) rc.out(r).upload(std::vector<bf16>(pin_out[r], pin_out[r] + n));
    }
    rc.finish(x, n);
  }
  for (int r = 0; r < P; ++r) cudaFreeHost(pin_in[r]), cudaFreeHost(pin_out[r]);
}

TEST_CASE("two co-located ranks' calls on one stream: refused at once, and every rank's call gives up at once") {
  const auto devices = rank_devices(static_cast<int>(local_comms().size()));
  if (devices.size() < 2 || devices[0] != devices[1]) {
    MESSAGE("SKIPPED here: needs two ranks of this process on one GPU (ECHO_TEST_RANKS above the GPU count)");
    return;
  }
  echo::all_reduce_options opt;
  opt.spin_limit_seconds = 30;  // far above what the refusal may take
  reference_check<za4, ef8, bf16> rc(50000, opt);
  rc.step(50000);
  (void)rc.upload_random(50000);
  const int P = rc.ranks();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<st> got(P);
  cudaSetDevice(devices[0]);
  got[0] = rc.ar(0)(rc.in(0).ptr, rc.out(0).ptr, 50000, rc.stream(0), rc.chain(0));
  got[1] = rc.ar(1)(rc.in(1).ptr, rc.out(1).ptr, 50000, rc.stream(0), rc.chain(1));  // rank 0's stream
  for (int r = 2; r < P; ++r) {
    cudaSetDevice(devices[r]);
    got[r] = rc.ar(r)(rc.in(r).ptr, rc.out(r).ptr, 50000, rc.stream(r), rc.chain(r));
  }
  CHECK(got[0] == st::success);
  CHECK(got[1] == st::invalid_argument);
  CHECK(contains(rc.ar(1).last_error(), "stream"));
  const std::vector<st> after = checks(rc);
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 10.0);
  for (int r = 0; r < P; ++r) {
    INFO("rank " << r);
    CHECK(after[r] != st::success);  // every object is poisoned: rebuild them
  }
  CHECK(rc.ar(0)(rc.in(0).ptr, rc.out(0).ptr, 50000, rc.stream(0), rc.chain(0)) == st::poisoned);
}
