// echo::all_reduce's reduce_scatter and all_gather (the sequence-parallel pair) against
// echo::reference::reduce_scatter and all_gather (of the closing quantizer: the object's
// all-gather codes with it) bit for bit on every rank: quantizers, element
// types, chains (alone and mixed with all-reduces of the same n), segments that wrap the rings
// over several rounds, the 16-bit path of the size dispatch, CUDA graphs, ranks that disagree, and
// the misuse refused before anything runs.
#include "support/gpu_harness.cuh"

using namespace echo_test;
using bf16 = echo::bfloat16_t;
using za4 = echo::quant::zero_aware<4, 128>;
using ef16 = echo::comp::error_feedback<echo::bfloat16_t>;
using ef8 = echo::comp::error_feedback<echo::comp::int8_state>;

namespace {

/// reference_check over echo::sequence_parallel objects.
template <class Q, class C, class T>
using sp_check = reference_check<Q, C, T, echo::transport::cuda_ipc::tag, echo::collective::with_sequence_parallel>;

template <class RC>
void expect_status(RC& rc, const std::vector<echo::status>& st) {
  for (int r = 0; r < rc.ranks(); ++r) {
    REQUIRE_MESSAGE(st[r] == echo::status::success, echo::to_string(st[r]), " (", rc.ar(r).last_error(), ")");
    ECHO_TEST_CUDA(cudaSetDevice(rc.in(r).device));
    ECHO_TEST_CUDA(cudaStreamSynchronize(rc.stream(r)));
    REQUIRE(rc.ar(r).check() == echo::status::success);
  }
}

template <class T>
void expect_equal(const std::vector<T>& got, const std::vector<T>& want, const char* what, int r, size_t n) {
  INFO(what << ": rank " << r << ", n " << n << ", seed " << seed());
  require_same_bits(got, want);
}

/// One reduce-scatter of n values on every rank (Ref: the reference's quantizer, Q or, on the
/// 16-bit path, quant::none), its chain continued in the reference's.
template <class Ref = void, class RC>
void scatter_step(RC& rc, size_t n) {
  using Q = typename RC::quantizer;
  using C = typename RC::compensator;
  using T = typename RC::element;
  using RQ = std::conditional_t<std::is_void<Ref>::value, Q, Ref>;
  const int P = rc.ranks();
  const size_t m = n / static_cast<size_t>(P);
  const auto host_in = rc.upload_random(n);
  std::vector<echo::status> st(static_cast<size_t>(P));
  rc.pool().run([&](int r) { st[r] = rc.ar(r).reduce_scatter(rc.in(r).ptr, rc.out(r).ptr, n, rc.stream(r), rc.chain(r)); });
  expect_status(rc, st);
  std::vector<std::vector<T>> want(static_cast<size_t>(P), std::vector<T>(m));
  std::vector<const T*> ri;
  std::vector<T*> ro;
  for (int r = 0; r < P; ++r) {
    ri.push_back(host_in[r].data());
    ro.push_back(want[r].data());
  }
  echo::reference::reduce_scatter<RQ, C> ref(P);
  if constexpr (C::keeps_state) ref(ri, ro, n, &rc.ref_chain());
  else ref(ri, ro, n);
  for (int r = 0; r < P; ++r) expect_equal(rc.out(r).download(m), want[r], "reduce_scatter", r, n);
}

/// One all-gather of m values a rank: the object codes it with its closing quantizer (Ref: the
/// quantizer of the path the dispatch takes instead, the 16-bit one).
template <class Ref = void, class RC>
void gather_step(RC& rc, size_t m) {
  using Q = typename RC::quantizer;
  using T = typename RC::element;
  using RQ = std::conditional_t<std::is_void<Ref>::value, echo::quant::closing_of_t<Q>, Ref>;
  const int P = rc.ranks();
  const size_t n = m * static_cast<size_t>(P);
  const auto host_in = rc.upload_random(m);
  std::vector<echo::status> st(static_cast<size_t>(P));
  rc.pool().run([&](int r) { st[r] = rc.ar(r).all_gather(rc.in(r).ptr, rc.out(r).ptr, m, rc.stream(r)); });
  expect_status(rc, st);
  std::vector<std::vector<T>> want(static_cast<size_t>(P), std::vector<T>(n));
  std::vector<const T*> ri;
  std::vector<T*> ro;
  for (int r = 0; r < P; ++r) {
    ri.push_back(host_in[r].data());
    ro.push_back(want[r].data());
  }
  const echo::reference::all_gather<RQ> ref(P);
  ref(ri, ro, m);
  for (int r = 0; r < P; ++r) expect_equal(rc.out(r).download(n), want[r], "all_gather", r, n);
}

/// Segments of whole groups of G: one group, odd counts, many tiles.
std::vector<size_t> segment_sizes(size_t G) { return {G, 3 * G, 37 * G, 4096 + 7 * G, 65536 + G}; }

}  // namespace

TEST_CASE("reduce_scatter and all_gather, 4-bit + error feedback: every segment size, one chain with all-reduces") {
  const size_t most = (65536 + 128) * 8;
  sp_check<za4, ef16, bf16> rc(most);
  const size_t P = static_cast<size_t>(rc.ranks());
  for (size_t m : segment_sizes(128)) scatter_step(rc, m * P);
  for (size_t m : segment_sizes(128)) gather_step(rc, m);
  // one chain: reduce-scatters continue it, and so do all-reduces of the same n in between
  const size_t n = 37 * 128 * P;
  for (int k = 0; k < 4; ++k) {
    scatter_step(rc, n);
    if (k % 2) rc.step(n);
  }
}

TEST_CASE("reduce_scatter and all_gather under the recommended default (rotated, clipped, int8 state)") {
  sp_check<echo::default_quantizer, ef8, bf16> rc(8 * 4096 * 4);
  const size_t P = static_cast<size_t>(rc.ranks());
  for (int k = 0; k < 3; ++k) scatter_step(rc, 4096 * P);
  gather_step(rc, 4096);
  gather_step(rc, echo::default_quantizer::group);
}

TEST_CASE("reduce_scatter and all_gather, other quantizers and element types, the 16-bit pipeline") {
  sp_check<echo::quant::zero_aware<8, 64>, echo::comp::none, echo::half_t> h((65536 + 64) * 8);
  const size_t P = static_cast<size_t>(h.ranks());
  for (size_t m : segment_sizes(64)) scatter_step(h, m * P);
  for (size_t m : segment_sizes(64)) gather_step(h, m);
  sp_check<echo::quant::symmetric<4, 32>, echo::comp::error_feedback<float>, float> f(40000 * 8);
  for (int k = 0; k < 3; ++k) scatter_step(f, 4000 * P);  // segments of 125 groups
  gather_step(f, 32 * 7);
  sp_check<echo::quant::none, echo::comp::none, bf16> none(256 * 300 * 8);
  scatter_step(none, 256 * 300 * P);
  gather_step(none, 256 * 3);
}

TEST_CASE("reduce_scatter and all_gather over small rings: several rounds a call, a chain across them") {
  // Rings far below a segment's packets: calls wrap them over several launches where ranks have
  // GPUs of their own (ranks sharing one take a whole call a launch, transports.md).
  echo::all_reduce_options opt;
  opt.workspace_bytes = size_t(256) << 10;
  sp_check<za4, ef16, bf16> rc(size_t(1) << 21, opt);
  const size_t P = static_cast<size_t>(rc.ranks());
  const size_t m = (size_t(1) << 21) / P / 128 * 128;
  for (int k = 0; k < 3; ++k) scatter_step(rc, m * P);
  for (int k = 0; k < 2; ++k) gather_step(rc, m);
  rc.step(m * P);  // an all-reduce after them, as the ring's next user
  scatter_step(rc, m * P);
}

TEST_CASE("the size dispatch: small segments of whole 256s take the 16-bit path, others the quantizer") {
  echo::all_reduce_options opt;
  opt.unquantized_below_bytes = 1 << 20;
  sp_check<za4, ef16, bf16> rc(256 * 64 * 8, opt);
  const size_t P = static_cast<size_t>(rc.ranks());
  scatter_step<echo::quant::none>(rc, 256 * 64 * P);
  gather_step<echo::quant::none>(rc, 256 * 5);
  // a segment of 128 is not whole 256s: the quantizer takes it (its chain is a new n's)
  scatter_step<za4>(rc, 128 * P);
  gather_step(rc, 128 * 3);  // (the closing quantizer's codes)
}

TEST_CASE("reduce_scatter and all_gather in a CUDA graph: captured once, replayed on fresh inputs") {
  sp_check<za4, ef16, bf16> rc(4096 * 8);
  const int P = rc.ranks();
  const size_t m = 1024, n = m * static_cast<size_t>(P);
  // rank r's graph: a reduce-scatter of in into out, then an all-gather of out's segment back
  // into in (a sequence-parallel layer's pair)
  std::vector<cudaGraphExec_t> execs(static_cast<size_t>(P));
  for (int r = 0; r < P; ++r) {
    ECHO_TEST_CUDA(cudaSetDevice(rc.in(r).device));
    cudaGraph_t g;
    ECHO_TEST_CUDA(cudaStreamBeginCapture(rc.stream(r), cudaStreamCaptureModeThreadLocal));
    const echo::status a = rc.ar(r).reduce_scatter(rc.in(r).ptr, rc.out(r).ptr, n, rc.stream(r), rc.chain(r));
    const echo::status b = rc.ar(r).all_gather(rc.out(r).ptr, rc.in(r).ptr + n, m, rc.stream(r));
    ECHO_TEST_CUDA(cudaStreamEndCapture(rc.stream(r), &g));
    REQUIRE(a == echo::status::success);
    REQUIRE(b == echo::status::success);
    ECHO_TEST_CUDA(cudaGraphInstantiate(&execs[r], g, 0));
    ECHO_TEST_CUDA(cudaGraphDestroy(g));
  }
  echo::reference::reduce_scatter<za4, ef16> rs(P);
  echo::reference::all_gather<echo::quant::closing_of_t<za4>> ag(P);
  for (int it = 0; it < 10; ++it) {
    const auto host_in = rc.upload_random(n);
    for (int r = 0; r < P; ++r) {
      ECHO_TEST_CUDA(cudaSetDevice(rc.in(r).device));
      ECHO_TEST_CUDA(cudaGraphLaunch(execs[r], rc.stream(r)));
    }
    std::vector<echo::status> ok(static_cast<size_t>(P), echo::status::success);
    expect_status(rc, ok);
    std::vector<std::vector<bf16>> seg(static_cast<size_t>(P), std::vector<bf16>(m)), all(static_cast<size_t>(P), std::vector<bf16>(n));
    std::vector<const bf16*> ri, si;
    std::vector<bf16*> so, ao;
    for (int r = 0; r < P; ++r) {
      ri.push_back(host_in[r].data());
      so.push_back(seg[r].data());
      si.push_back(seg[r].data());
      ao.push_back(all[r].data());
    }
    rs(ri, so, n, &rc.ref_chain());
    ag(si, ao, m);
    for (int r = 0; r < P; ++r) {
      expect_equal(rc.out(r).download(m), seg[r], "graph reduce_scatter", r, n);
      std::vector<bf16> got = rc.in(r).download(2 * n);
      expect_equal(std::vector<bf16>(got.begin() + static_cast<long>(n), got.end()), all[r], "graph all_gather", r, n);
    }
  }
  for (int r = 0; r < P; ++r) {
    cudaSetDevice(rc.in(r).device);
    cudaGraphExecDestroy(execs[r]);
  }
}

TEST_CASE("ranks that disagree (a reduce-scatter against an all-reduce of the same n) fail with status::mismatch") {
  sp_check<za4, echo::comp::none, bf16> rc(4096 * 8);
  const int P = rc.ranks();
  const size_t n = 1024 * static_cast<size_t>(P);
  (void)rc.upload_random(n);
  std::vector<echo::status> st(static_cast<size_t>(P));
  rc.pool().run([&](int r) {
    st[r] = r == 0 ? rc.ar(r).reduce_scatter(rc.in(r).ptr, rc.out(r).ptr, n, rc.stream(r))
                   : rc.ar(r)(rc.in(r).ptr, rc.out(r).ptr, n, rc.stream(r));
  });
  for (int r = 0; r < P; ++r) {
    REQUIRE(st[r] == echo::status::success);
    ECHO_TEST_CUDA(cudaSetDevice(rc.in(r).device));
    ECHO_TEST_CUDA(cudaStreamSynchronize(rc.stream(r)));
    CHECK(rc.ar(r).check() == echo::status::mismatch);
  }
}

TEST_CASE("reduce_scatter and all_gather misuse: refused before anything runs, the chain untouched") {
  sp_check<za4, ef16, bf16> rc(4096 * 8);
  const int P = rc.ranks();
  const size_t n = 1024 * static_cast<size_t>(P);
  scatter_step(rc, n);  // a chain of n to keep
  rc.pool().run([&](int r) {
    auto& ar = rc.ar(r);
    bf16* in = rc.in(r).ptr;
    bf16* out = rc.out(r).ptr;
    const cudaStream_t s = rc.stream(r);
    auto refused = [&](echo::status got, const char* says) {
      CHECK(got == echo::status::invalid_argument);
      CHECK(std::string(ar.last_error()).find(says) != std::string::npos);
    };
    refused(ar.reduce_scatter(in, out, n + 1, s, rc.chain(r)), "n % P");
    refused(ar.reduce_scatter(in, out, 64 * static_cast<size_t>(P), s, rc.chain(r)), "whole number of the quantizer's groups");
    refused(ar.reduce_scatter(in, in + 128, n, s, rc.chain(r)), "overlap");
    // (the chain's view: an echo::chain of max_elements would refuse its capacity first)
    refused(ar.reduce_scatter(in, out, size_t(4096) * 8 + static_cast<size_t>(P) * 128, s, rc.chain(r)->view()),
            "above max_elements");
    refused(ar.reduce_scatter(in, out, n, s, nullptr), "needs a chain");
    refused(ar.reduce_scatter(in + 1, out, n, s, rc.chain(r)), "in: not 16-byte aligned");
    refused(ar.all_gather(in, out, 64, s), "whole number of the quantizer's groups");
    refused(ar.all_gather(in, out, 4096 * 8, s), "above max_elements");
    refused(ar.all_gather(in, in, 1024, s), "overlap");
    refused(ar.all_gather(static_cast<const bf16*>(nullptr), out, 1024, s), "in: null");
  });
  scatter_step(rc, n);  // the chain continues as if nothing had been called
}
