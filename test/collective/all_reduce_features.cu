// echo::all_reduce beyond the sweep: chains, in place, deferred state, CUDA graphs, concurrent
// chains, size dispatch, timeouts and invalid arguments. Every result is checked against
// echo::reference bit for bit.
#include "support/gpu_harness.cuh"

#include <chrono>
#include <cmath>
#include <limits>

using namespace echo_test;
using za4 = echo::quant::zero_aware<4, 128>;
using ef16 = echo::comp::error_feedback<echo::bfloat16_t>;
using ef32 = echo::comp::error_feedback<float>;
using ef8 = echo::comp::error_feedback<echo::comp::int8_state>;
using ef4 = echo::comp::error_feedback<echo::comp::int4_state>;
using efs8 = echo::comp::error_feedback<echo::comp::step8_state>;
using efs4 = echo::comp::error_feedback<echo::comp::step4_state>;
using bf16 = echo::bfloat16_t;

TEST_CASE("20 calls on one error_feedback chain follow the reference chain") {
  reference_check<za4, ef32, bf16> a(100003);
  for (int k = 0; k < 20; ++k) a.step(100003);
  reference_check<za4, ef16, echo::half_t> b(100003);
  for (int k = 0; k < 20; ++k) b.step(100003);
  reference_check<za4, ef8, bf16> c(100003);
  for (int k = 0; k < 20; ++k) c.step(100003);
  reference_check<echo::quant::zero_aware<8, 64>, ef4, float> d(100003);
  for (int k = 0; k < 20; ++k) d.step(100003);
  // The error in units of the data group's step: 8 bits on bf16 (tail group), 4 bits on fp16
  // with 8-bit data, 8 bits under a symmetric grid of 32 on float.
  reference_check<za4, efs8, bf16> e(100003);
  for (int k = 0; k < 20; ++k) e.step(100003);
  reference_check<echo::quant::zero_aware<8, 64>, efs4, echo::half_t> f(100003);
  for (int k = 0; k < 10; ++k) f.step(100003);
  reference_check<echo::quant::symmetric<4, 32>, efs8, float> g(77777);
  for (int k = 0; k < 10; ++k) g.step(77777);
}

namespace {
/// Inputs with -0 at every third element on every rank (and +0 / -0 mixed at every fifth): a call
/// that starts a chain must add nothing to them, a call that continues it adds the stored errors.
template <class Q, class C>
void negative_zeros(size_t n) {
  reference_check<Q, C, bf16> rc(n);
  for (int call = 0; call < 3; ++call) {
    std::vector<std::vector<bf16>> in(rc.ranks());
    for (int r = 0; r < rc.ranks(); ++r) {
      in[r] = random_elements<bf16>(rc.random(), n);
      for (size_t k = 0; k < n; k += 3) in[r][k] = narrow<bf16>(-0.0f);
      for (size_t k = 0; k < n; k += 5) in[r][k] = narrow<bf16>(r % 2 ? -0.0f : 0.0f);
      for (size_t k = 256; k < std::min(n, size_t(512)); ++k) in[r][k] = narrow<bf16>(-0.0f);  // whole groups
      rc.in(r).upload(in[r]);
    }
    rc.launch(n);
    rc.finish(in, n);
  }
}
}  // namespace

TEST_CASE("negative zeros on a fresh and on a continued chain match the reference") {
  negative_zeros<echo::quant::none, ef16>(300007);  // the 16-bit pipeline (quant::none) with a chain
  negative_zeros<za4, ef16>(100003);
  negative_zeros<za4, efs8>(100003);
}

TEST_CASE("a shape change resets the chain, as in the reference") {
  reference_check<za4, ef16, bf16> rc(50000);
  rc.step(50000);
  rc.step(50000);
  rc.step(4097);
  rc.step(50000);
}

TEST_CASE("in place equals out of place") {
  echo::all_reduce_options opt;
  opt.workspace_bytes = size_t(1) << 20;  // and wrap around the rings
  reference_check<za4, ef16, bf16> rc(1000003, opt);
  for (int k = 0; k < 3; ++k) rc.step(1000003, /*in_place=*/true);
  rc.step(4097, true);
  reference_check<echo::quant::none, echo::comp::none, float> exact(77777);
  exact.step(77777, true);
}

TEST_CASE("deferred state update gives the fused result") {
  reference_check<za4, ef16, bf16> rc(300001);
  for (int k = 0; k < 5; ++k) rc.step(300001, false, echo::state_update::deferred);
  reference_check<echo::quant::symmetric<8, 32>, ef32, float> rc2(4097);
  for (int k = 0; k < 3; ++k) rc2.step(4097, false, echo::state_update::deferred);
  // The default state (step8): by the data step, and by its own step on a grid without zero.
  reference_check<za4, efs8, bf16> rs(300001);
  for (int k = 0; k < 4; ++k) rs.step(300001, false, k % 2 ? echo::state_update::fused : echo::state_update::deferred);
  reference_check<echo::quant::naive_zero_point<4, 128>, efs8, bf16> rn(300001);
  for (int k = 0; k < 4; ++k) rn.step(300001, false, k % 2 ? echo::state_update::fused : echo::state_update::deferred);
  if (runnable<echo::transport::nccl::tag>()) {
    reference_check<za4, ef8, bf16, echo::transport::nccl::tag> rc3(300001);
    for (int k = 0; k < 4; ++k) rc3.step(300001, false, k % 2 ? echo::state_update::deferred : echo::state_update::fused);
  }
}

TEST_CASE("quant::none: the exact fp32 sum, rounded once") {
  reference_check<echo::quant::none, echo::comp::none, float> f(262147);
  f.step(262147);
  reference_check<echo::quant::none, ef16, bf16> b(262147);
  for (int k = 0; k < 3; ++k) b.step(262147);
}

TEST_CASE("other bit widths: 2, 3 and 6 bits") {
  reference_check<echo::quant::zero_aware<2, 64>, ef16, bf16> a(70001);
  a.step(70001);
  reference_check<echo::quant::zero_aware<3, 32>, ef16, bf16> b(70001);
  b.step(70001);
  reference_check<echo::quant::naive_zero_point<6, 256>, echo::comp::none, echo::half_t> c(70001);
  c.step(70001);
}

TEST_CASE("CUDA graph capture, then 100 replays with fresh inputs") {
  const size_t n = 65537;
  reference_check<za4, ef16, bf16> rc(n);
  rc.step(n);
  const int P = rc.ranks();
  std::vector<cudaGraphExec_t> execs(P);
  for (int r = 0; r < P; ++r) {
    ECHO_TEST_CUDA(cudaSetDevice(rc.in(r).device));
    cudaGraph_t g;
    ECHO_TEST_CUDA(cudaStreamBeginCapture(rc.stream(r), cudaStreamCaptureModeThreadLocal));
    const echo::status s = rc.ar(r)(rc.in(r).ptr, rc.out(r).ptr, n, rc.stream(r), rc.chain(r));
    ECHO_TEST_CUDA(cudaStreamEndCapture(rc.stream(r), &g));
    REQUIRE(s == echo::status::success);
    ECHO_TEST_CUDA(cudaGraphInstantiate(&execs[r], g, 0));
    ECHO_TEST_CUDA(cudaGraphDestroy(g));
  }
  for (int it = 0; it < 100; ++it) {
    const auto host_in = rc.upload_random(n);
    for (int r = 0; r < P; ++r) {
      ECHO_TEST_CUDA(cudaSetDevice(rc.in(r).device));
      ECHO_TEST_CUDA(cudaGraphLaunch(execs[r], rc.stream(r)));
    }
    rc.finish(host_in, n);
  }
  for (int r = 0; r < P; ++r) {
    cudaSetDevice(rc.in(r).device);
    cudaGraphExecDestroy(execs[r]);
  }
}

TEST_CASE("two chains interleaved on two streams") {
  reference_check<za4, ef16, bf16> a(200003);
  reference_check<echo::quant::zero_aware<8, 128>, ef32, bf16> b(150001);
  for (int k = 0; k < 6; ++k) {
    const auto ia = a.upload_random(200003);
    const auto ib = b.upload_random(150001);
    a.launch(200003);
    b.launch(150001);  // in flight together with a's call
    a.finish(ia, 200003);
    b.finish(ib, 150001);
  }
}

namespace {

/// Small calls (one-shot, in place and not, plain and deferred) interleaved with large ones (the
/// pipeline), so the one-shot halves alternate and both paths share epochs; each against its own
/// reference. With a compensator the chain passes through the small calls untouched: the large
/// calls continue it as if the small ones had not happened.
template <class C>
void one_shot_between_pipeline_calls() {
  echo::all_reduce_options opt;
  opt.unquantized_below_bytes = 1 << 20;
  reference_check<za4, C, bf16> rc(600000, opt);
  CHECK(rc.ar(0).unquantized_below_bytes() == (1u << 20));
  const size_t small[] = {1, 4097, 100003, 524287};
  for (int k = 0; k < 8; ++k) {
    const size_t n = small[k % 4];
    const bool in_place = k % 2 == 1;
    const auto mode = !in_place && k % 4 == 2 ? echo::state_update::deferred : echo::state_update::fused;
    const auto host_in = rc.upload_random(n);
    rc.pool().run([&](int r) {
      bf16* out = in_place ? rc.in(r).ptr : rc.out(r).ptr;
      REQUIRE(rc.ar(r)(rc.in(r).ptr, out, n, rc.stream(r), rc.chain(r), mode) == echo::status::success);
    });
    // Every rank's call queued before any rank's update (ranks sharing a GPU may share a hardware
    // queue: gpu_harness.cuh, reference_check::launch). The update finds nothing pending.
    if constexpr (C::keeps_state)
      if (mode == echo::state_update::deferred)
        rc.pool().run([&](int r) {
          REQUIRE(rc.ar(r).update(rc.in(r).ptr, n, rc.stream(r), *rc.chain(r)) == echo::status::success);
        });
    for (int r = 0; r < rc.ranks(); ++r) {
      ECHO_TEST_CUDA(cudaSetDevice(rc.in(r).device));
      ECHO_TEST_CUDA(cudaStreamSynchronize(rc.stream(r)));
      REQUIRE(rc.ar(r).check() == echo::status::success);
    }
    std::vector<std::vector<bf16>> want(rc.ranks(), std::vector<bf16>(n));
    std::vector<const bf16*> ri;
    std::vector<bf16*> ro;
    for (int r = 0; r < rc.ranks(); ++r) ri.push_back(host_in[r].data()), ro.push_back(want[r].data());
    echo::reference::all_reduce<echo::quant::none>(rc.ranks())(ri, ro, n);  // no chain
    for (int r = 0; r < rc.ranks(); ++r)
      CHECK(first_mismatch((in_place ? rc.in(r) : rc.out(r)).download(n), want[r]) == -1);
    if (k % 3 == 2) rc.step(600000);  // 1.2 MB: quantized, checked against reference<zero_aware> along the chain
  }
}

}  // namespace

TEST_CASE("size dispatch: small calls take the unquantized one-shot path, large ones the quantized path") {
  one_shot_between_pipeline_calls<echo::comp::none>();
}

TEST_CASE("size dispatch with error feedback: the one-shot path passes the chain through untouched") {
  one_shot_between_pipeline_calls<ef16>();
}

TEST_CASE("the wide policy: forced at every size, and switched by size within one object's calls") {
  // Forced (from 0 bytes), with rings small enough that it wraps them under flow control.
  echo::all_reduce_options all;
  all.wide_policy_from_bytes = 0;
  all.workspace_bytes = size_t(1) << 20;
  reference_check<za4, ef16, bf16> a(1000003, all);
  CHECK(a.ar(0).engine().wide_from_bytes() == 0);
  for (int k = 0; k < 4; ++k) a.step(1000003);
  CHECK(a.ar(0).engine().last_run_wide());
  a.step(4097);
  CHECK(a.ar(0).engine().last_run_wide());
  reference_check<echo::quant::zero_aware<8, 64>, echo::comp::none, float> b(300007, all);
  for (int k = 0; k < 2; ++k) b.step(300007, k == 1);
  // The heavy policy's L2 prefetch over every kind of stored error and input: int4 codes with
  // fp16 input, exact float errors, and the 16-bit pipeline with error feedback (heavy too).
  reference_check<za4, ef4, echo::half_t> h4(300007, all);
  for (size_t n : {size_t(300007), size_t(300007), size_t(70001), size_t(70001)}) h4.step(n);
  CHECK(h4.ar(0).engine().last_run_wide());
  reference_check<echo::quant::zero_aware<8, 128>, ef32, float> h32(300007, all);
  for (size_t n : {size_t(300007), size_t(300007)}) h32.step(n);
  reference_check<za4, efs8, bf16> hs8(300007, all);  // step codes under the heavy policy
  for (size_t n : {size_t(300007), size_t(300007), size_t(70001), size_t(70001)}) hs8.step(n);
  CHECK(hs8.ar(0).engine().last_run_wide());
  reference_check<echo::quant::none, efs8, bf16> hn8(700001, all);  // no data step: its own
  for (size_t n : {size_t(700001), size_t(700001)}) hn8.step(n);
  reference_check<echo::quant::none, ef16, bf16> h16(700001, all);
  for (size_t n : {size_t(700001), size_t(700001), size_t(600001), size_t(600001)}) {
    h16.step(n);
    CHECK(h16.ar(0).engine().last_run_wide());
  }
  // The lean wide policy (no state, at most 4 bits: 2 blocks a SM, 32 values a lane), with a
  // group of 4 lanes (g 128) and of one lane (g 32), full and tail lanes.
  reference_check<za4, echo::comp::none, bf16> lean(1000003, all);
  for (size_t n : {size_t(1000003), size_t(4097), size_t(1000003)}) lean.step(n);
  CHECK(lean.ar(0).engine().last_run_wide());
  reference_check<echo::quant::zero_aware<4, 32>, echo::comp::none, echo::half_t> lean32(300007, all);
  for (size_t n : {size_t(300007), size_t(31)}) lean32.step(n);
  // The plain wide policy (the 16-bit pipeline without state: one block of 8 warps a SM), its
  // rings wrapped, bf16 (16 values a lane) and float (8); sizes above the one-shot kernel's.
  reference_check<echo::quant::none, echo::comp::none, bf16> plain(1000003, all);
  for (size_t n : {size_t(1000003), size_t(600001), size_t(1000003)}) {
    plain.step(n);
    CHECK(plain.ar(0).engine().last_run_wide());
  }
  reference_check<echo::quant::none, echo::comp::none, float> plain32(700001, all);
  for (size_t n : {size_t(700001), size_t(300007), size_t(700001)}) {
    plain32.step(n);
    CHECK(plain32.ar(0).engine().last_run_wide());
  }
  // From 1 MiB on: calls alternate between the two policies on one long-lived object, chains
  // reset and continue across the switch, the deferred update follows either.
  echo::all_reduce_options some;
  some.wide_policy_from_bytes = 1 << 20;
  reference_check<za4, ef8, bf16> c(1500007, some);
  const size_t sizes[] = {1500007, 1500007, 200003, 1500007, 524288, 524289, 777777, 1500007};
  for (int k = 0; k < 8; ++k) {
    c.step(sizes[k], k == 4, k % 2 ? echo::state_update::deferred : echo::state_update::fused);
    CHECK(c.ar(0).engine().last_run_wide() == (sizes[k] * sizeof(bf16) >= (1u << 20)));
  }
  reference_check<echo::quant::none, echo::comp::none, echo::half_t> d(1200000, some);
  for (size_t n : {1200000, 300000, 1200000}) d.step(n);
}

TEST_CASE("the mid policy: forced at every size through rings it wraps in rounds, and three tiers on one object") {
  // Forced: every quantized call takes the mid policy (32 values a lane, 8192 or 16384 a flag),
  // with rings small enough for several rounds (n = 1000003 at P = 2: 245 tiles, 120 slots; one
  // round where ranks share a context).
  echo::all_reduce_options mid;
  mid.mid_policy_from_bytes = 0;
  mid.wide_policy_from_bytes = echo::tuning::never;
  mid.workspace_bytes = size_t(512) << 10;
  reference_check<za4, echo::comp::none, bf16> lean(1000003, mid);  // lean: 16384 a flag
  CHECK(lean.ar(0).engine().mid_from_bytes() == 0);
  for (size_t n : {size_t(1000003), size_t(4097), size_t(1000003), size_t(31)}) {
    lean.step(n);
    CHECK(lean.ar(0).engine().last_run_mid());
    CHECK(!lean.ar(0).engine().last_run_wide());
  }
  // stateful: the default state (step8), fused and deferred, in place too
  reference_check<za4, echo::comp::error_feedback<>, bf16> heavy(1000003, mid);
  const size_t hs[] = {1000003, 1000003, 70001, 70001, 1000003};
  for (int k = 0; k < 5; ++k) {
    heavy.step(hs[k], k == 4, k % 2 ? echo::state_update::deferred : echo::state_update::fused);
    CHECK(heavy.ar(0).engine().last_run_mid());
  }
  reference_check<echo::quant::zero_aware<8, 128>, ef16, bf16> h8(300007, mid);  // 8-bit: 16 a lane
  for (size_t n : {size_t(300007), size_t(300007), size_t(4099)}) {
    h8.step(n);
    CHECK(h8.ar(0).engine().last_run_mid());
  }
  reference_check<echo::quant::zero_aware<4, 32>, echo::comp::none, echo::half_t> g32(300007, mid);  // a group a lane
  for (size_t n : {size_t(300007), size_t(33)}) {
    g32.step(n);
    CHECK(g32.ar(0).engine().last_run_mid());
  }
  reference_check<za4, efs8, float> f32(300007, mid);  // 4-byte elements: 16 values a lane
  for (size_t n : {size_t(300007), size_t(300007)}) f32.step(n);
  CHECK(f32.ar(0).engine().last_run_mid());
  reference_check<echo::quant::none, echo::comp::none, bf16> plain(700001, mid);  // never unquantized calls
  plain.step(700001);
  CHECK(!plain.ar(0).engine().last_run_mid());
  // One long-lived object across the three tiers: narrow below 1 MiB, mid from 1 MiB, wide from
  // 2 MiB; the chain continues across every switch.
  echo::all_reduce_options tiers;
  tiers.mid_policy_from_bytes = 1 << 20;
  tiers.wide_policy_from_bytes = 2 << 20;
  reference_check<za4, echo::comp::error_feedback<>, bf16> t(1500007, tiers);
  const size_t sizes[] = {1500007, 700001, 200003, 1500007, 524288, 524287, 1048576, 777777, 777777, 1048575};
  for (int k = 0; k < 10; ++k) {
    t.step(sizes[k], k == 5, k % 3 == 1 ? echo::state_update::deferred : echo::state_update::fused);
    const size_t bytes = sizes[k] * sizeof(bf16);
    CHECK(t.ar(0).engine().last_run_wide() == (bytes >= (2u << 20)));
    CHECK(t.ar(0).engine().last_run_mid() == (bytes >= (1u << 20) && bytes < (2u << 20)));
  }
}

TEST_CASE("by default the dispatch table decides the unquantized threshold") {
  auto ars = make_all<echo::all_reduce<za4>>(1000);
  cudaDeviceProp prop{};
  ECHO_TEST_CUDA(cudaGetDeviceProperties(&prop, 0));
  const auto d = echo::tuning::lookup_dispatch(prop.name, static_cast<int>(ars.size()), "cuda_ipc", "p2p").sizes;
  constexpr size_t never = echo::tuning::never;
  CHECK(ars[0]->unquantized_below_bytes() == d.unquantized_below);
  CHECK(ars[0]->engine().wide_from_bytes() == d.wide_from);
  CHECK(ars[0]->engine().mid_from_bytes() == d.mid_from);
  using K = echo::tuning::call_weight;
  const auto& e = ars[0]->engine();
  CHECK(e.mid_to_bytes(K::heavy) == d.mid_to_heavy);
  CHECK(e.mid_to_bytes(K::lean) == d.mid_to_lean);
  CHECK(e.mid_to_bytes(K::stateful) == d.mid_to_stateful);
  // Each call takes the wide size of its weight: 4-bit and 8-bit without state, the 16-bit
  // pipeline, and 4-bit with error-feedback state.
  static_assert(echo::tuning::detail::weight_of<za4, echo::comp::none>() == K::lean, "");
  static_assert(echo::tuning::detail::weight_of<za4, echo::comp::error_feedback<>>() == K::stateful, "");
  static_assert(echo::tuning::detail::weight_of<echo::quant::zero_aware<8, 128>, ef16>() == K::heavy, "");
  static_assert(echo::tuning::detail::weight_of<echo::quant::none, ef16>() == K::heavy, "");
  static_assert(echo::tuning::detail::weight_of<echo::quant::none, echo::comp::none>() == K::plain, "");
  CHECK(e.template wide_size<za4>() == e.mid_to_bytes(K::lean));
  CHECK(e.template wide_size<echo::quant::zero_aware<8, 128>>() == e.mid_to_bytes(K::heavy));
  CHECK(e.template wide_size<echo::quant::none>() == e.wide_from_unquantized_bytes());
  using stateful_ar = echo::all_reduce<za4, echo::transport::cuda_ipc::tag, echo::comp::error_feedback<>>;
  auto stateful = make_all<stateful_ar>(1000);
  const auto& s = stateful[0]->engine();
  CHECK(s.template wide_size<za4>() == e.mid_to_bytes(K::stateful));
  // The tier each call asks for, by size (no call made: such messages are too large for a test).
  using tier = echo::tuning::tier;
  if (d.mid_from != never) {
    CHECK(e.template tier_for<za4>(d.mid_from - 1) == tier::narrow);
    CHECK(e.template tier_for<za4>(d.mid_from) == tier::mid);
    CHECK(s.template tier_for<za4>(d.mid_from) == tier::mid);
    if (d.mid_to_lean != never) CHECK(e.template tier_for<za4>(d.mid_to_lean) == tier::wide);
    if (d.mid_to_stateful == never) CHECK(s.template tier_for<za4>(size_t(1) << 40) == tier::mid);
  }
  // The mid tier switched off by the options: every weight, the stateful one too, goes wide from
  // the table's wide_from as under a policy without a mid variant; none stays narrow.
  stateful_ar::options off;
  off.mid_policy_from_bytes = echo::tuning::never;
  auto no_mid = make_all<stateful_ar>(1000, off);
  const auto& o = no_mid[0]->engine();
  CHECK(o.template tier_for<za4>(size_t(1) << 40) == (d.wide_from != never ? tier::wide : tier::narrow));
  if (d.wide_from != never) {
    CHECK(o.template tier_for<za4>(d.wide_from - 1) == tier::narrow);
    CHECK(o.template tier_for<za4>(d.wide_from) == tier::wide);
  }
  // Both sizes from the options (any GPU): narrow, mid, wide.
  stateful_ar::options both;
  both.mid_policy_from_bytes = 1 << 20;
  both.wide_policy_from_bytes = 2 << 20;
  auto three = make_all<stateful_ar>(1000, both);
  const auto& t = three[0]->engine();
  CHECK(t.template tier_for<za4>((1 << 20) - 1) == tier::narrow);
  CHECK(t.template tier_for<za4>(1 << 20) == tier::mid);
  CHECK(t.template tier_for<za4>((2 << 20) - 1) == tier::mid);
  CHECK(t.template tier_for<za4>(2 << 20) == tier::wide);
  CHECK(t.template tier_for<echo::quant::none>(2 << 20) == tier::wide);
  CHECK(t.template tier_for<echo::quant::none>((2 << 20) - 1) == tier::narrow);
  CHECK(ars[0]->engine().wide_from_unquantized_bytes() == d.wide_from_unquantized);
}

TEST_CASE("the runtime-dtype call equals the typed call") {
  reference_check<za4, ef16, bf16> rc(9999);
  for (int k = 0; k < 2; ++k) {
    const auto host_in = rc.upload_random(9999);
    for (int r = 0; r < rc.ranks(); ++r)
      REQUIRE(rc.ar(r)(echo::dtype::bf16, rc.in(r).ptr, rc.out(r).ptr, 9999, rc.stream(r), rc.chain(r)) ==
              echo::status::success);
    rc.finish(host_in, 9999);
  }
}

TEST_CASE("invalid arguments are rejected without a launch, and the object stays usable") {
  reference_check<za4, ef16, bf16> rc(10000);
  auto& ar = rc.ar(0);
  bf16* in = rc.in(0).ptr;
  bf16* out = rc.out(0).ptr;
  cudaStream_t s = rc.stream(0);
  using st = echo::status;
  CHECK(ar(static_cast<const bf16*>(nullptr), out, 100, s, rc.chain(0)) == st::invalid_argument);
  CHECK(ar(in, static_cast<bf16*>(nullptr), 100, s, rc.chain(0)) == st::invalid_argument);
  CHECK(ar(in + 1, out, 100, s, rc.chain(0)) == st::invalid_argument);  // 2-byte misaligned
  CHECK(ar(in, out + 3, 100, s, rc.chain(0)) == st::invalid_argument);
  CHECK(ar(in, out, 10001, s, rc.chain(0)) == st::invalid_argument);  // above max_elements
  CHECK(ar(in, out, 100, s, nullptr) == st::invalid_argument);        // error_feedback needs a chain
  echo::chain<ef16> small(10);
  CHECK(ar(in, out, 100, s, &small) == st::invalid_argument);        // chain too small
  CHECK(ar(in, in, 100, s, rc.chain(0), echo::state_update::deferred) == st::invalid_argument);
  CHECK(ar(static_cast<echo::dtype>(7), in, out, 100, s, rc.chain(0)) == st::invalid_argument);
  CHECK(std::string(ar.last_error()).find("dtype") != std::string::npos);
  CHECK(ar(in, out, 0, s, rc.chain(0)) == st::success);  // n = 0: nothing to do
  CHECK(cudaGetLastError() == cudaSuccess);            // no sticky error left behind
  for (int k = 0; k < 2; ++k) rc.step(10000);          // still works, and the chain is intact
}

TEST_CASE("a call that only one rank makes times out within the spin limit, then reports poisoned") {
  echo::all_reduce_options opt;
  opt.spin_limit_seconds = 0.5;
  reference_check<za4, echo::comp::none, bf16> rc(100000, opt);
  rc.step(100000);  // a good call first
  auto& ar = rc.ar(0);
  ECHO_TEST_CUDA(cudaSetDevice(rc.in(0).device));
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(ar(rc.in(0).ptr, rc.out(0).ptr, 100000, rc.stream(0)) == echo::status::success);  // launched
  ECHO_TEST_CUDA(cudaStreamSynchronize(rc.stream(0)));  // returns: no hang
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(ar.check() == echo::status::timeout);
  CHECK(secs < 5.0);
  CHECK(ar(rc.in(0).ptr, rc.out(0).ptr, 100000, rc.stream(0)) == echo::status::poisoned);
  CHECK(cudaGetLastError() == cudaSuccess);
  // The peers were told (the abort word): their next launch gives up at once instead of waiting.
  for (int r = 1; r < rc.ranks(); ++r) {
    ECHO_TEST_CUDA(cudaSetDevice(rc.in(r).device));
    REQUIRE(rc.ar(r)(rc.in(r).ptr, rc.out(r).ptr, 100000, rc.stream(r)) == echo::status::success);
    ECHO_TEST_CUDA(cudaStreamSynchronize(rc.stream(r)));
    CHECK(rc.ar(r).check() == echo::status::timeout);
  }
}

TEST_CASE("one rank: an exact copy") {
  auto comms = echo::communicator::local({0}, false);
  echo::all_reduce<za4> ar(comms[0], 1000);
  echo_test::rng rng(seed());
  const auto h = random_elements<bf16>(rng, 1000);
  device_buffer<bf16> in(0, 1000), out(0, 1000);
  in.upload(h);
  REQUIRE(ar(in.ptr, out.ptr, 1000, nullptr) == echo::status::success);
  ECHO_TEST_CUDA(cudaDeviceSynchronize());
  CHECK(first_mismatch(out.download(1000), h) == -1);
}

TEST_CASE("a NaN poisons its group for one call only, as in the reference") {
  const size_t n = 10007;
  reference_check<za4, ef16, bf16> rc(n);
  for (int k = 0; k < 3; ++k) {
    auto host_in = rc.upload_random(n);
    if (k == 0) {  // one NaN on rank 1 in the first call
      host_in[1][5] = echo::element_traits<bf16>::from_float(NAN);
      rc.in(1).upload(host_in[1]);
    }
    rc.launch(n);
    rc.finish(host_in, n);
    size_t nans = 0;
    for (const bf16& v : rc.out(0).download(n)) nans += std::isnan(widen(v));
    CHECK(nans == (k == 0 ? 128u : 0u));  // the NaN's group of 128, then nothing
  }
}
