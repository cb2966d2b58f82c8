// The fused residual + RMSNorm epilogue on the GPU: every rank's out and residual against the
// host reference (the reference all-reduce, then reference::residual_rms_norm on each rank) bit
// for bit, across quantizers, compensators, the one-shot and the pipeline, row shapes that split
// tiles and segments unevenly, in place, deferred, closing calls, CUDA graphs; and the misuse
// that must be refused before anything runs.
#include "support/gpu_harness.cuh"

#include <limits>

using namespace echo_test;
using bf16 = echo::bfloat16_t;
using za4 = echo::quant::zero_aware<4, 128>;
using ef16 = echo::comp::error_feedback<echo::bfloat16_t>;
using ef8 = echo::comp::error_feedback<echo::comp::int8_state>;

namespace {

/// Per rank: a residual of n values and a weight of `hidden`, random and different on every rank
/// (a kernel that read another rank's would show).
template <class T>
struct rows_of {
  std::vector<std::vector<T>> residual, weight;
  std::vector<device_buffer<T>> d_residual, d_weight;
};

template <class T>
rows_of<T> upload_rows(rng& g, const std::vector<int>& devices, size_t n, size_t hidden) {
  rows_of<T> x;
  for (size_t r = 0; r < devices.size(); ++r) {
    x.residual.push_back(random_elements<T>(g, n));
    x.weight.push_back(random_elements<T>(g, hidden));
    x.d_residual.emplace_back(devices[r], n);
    x.d_weight.emplace_back(devices[r], hidden);
    x.d_residual.back().upload(x.residual.back());
    x.d_weight.back().upload(x.weight.back());
  }
  return x;
}

struct call_kind {
  bool in_place = false;
  bool deferred = false;
  bool closes = false;
};

/// One fused call of tokens x hidden values on every rank, checked against the reference.
template <class Q, class C, class T, class Transport>
void fused_step(reference_check<Q, C, T, Transport>& rc, size_t tokens, size_t hidden, call_kind k = {}, float eps = 1e-5f) {
  const int P = rc.ranks();
  const size_t n = tokens * hidden;
  const auto host_in = rc.upload_random(n);
  std::vector<int> devices;
  for (int r = 0; r < P; ++r) devices.push_back(rc.in(r).device);
  rows_of<T> x = upload_rows<T>(rc.random(), devices, n, hidden);
  const auto mode = k.deferred ? echo::state_update::deferred : echo::state_update::fused;
  std::vector<echo::status> st(static_cast<size_t>(P)), up(static_cast<size_t>(P), echo::status::success);
  auto out_of = [&](int r) { return k.in_place ? rc.in(r).ptr : rc.out(r).ptr; };
  rc.pool().run([&](int r) {
    const echo::epilogue::residual_rms_norm<T> e{x.d_residual[r].ptr, x.d_weight[r].ptr, hidden, eps};
    st[r] = k.closes ? rc.ar(r).close_chain(rc.in(r).ptr, out_of(r), n, rc.stream(r), e, rc.chain(r))
                     : rc.ar(r)(rc.in(r).ptr, out_of(r), n, rc.stream(r), e, rc.chain(r), mode);
  });
  if constexpr (C::keeps_state)
    if (k.deferred)
      rc.pool().run([&](int r) {
        if (st[r] == echo::status::success) up[r] = rc.ar(r).update(rc.in(r).ptr, n, rc.stream(r), *rc.chain(r));
      });
  for (int r = 0; r < P; ++r) {
    REQUIRE_MESSAGE(st[r] == echo::status::success, echo::to_string(st[r]), " (", rc.ar(r).last_error(), ")");
    REQUIRE(up[r] == echo::status::success);
    ECHO_TEST_CUDA(cudaSetDevice(devices[r]));
    ECHO_TEST_CUDA(cudaStreamSynchronize(rc.stream(r)));
    REQUIRE(rc.ar(r).check() == echo::status::success);
  }
  // the reference: the all-reduce, then each rank's epilogue
  std::vector<std::vector<T>> want(static_cast<size_t>(P), std::vector<T>(n));
  std::vector<const T*> ri;
  std::vector<T*> ro;
  std::vector<echo::epilogue::residual_rms_norm<T>> epi;
  for (int r = 0; r < P; ++r) {
    ri.push_back(host_in[r].data());
    ro.push_back(want[r].data());
    epi.push_back({x.residual[r].data(), x.weight[r].data(), hidden, eps});
  }
  echo::reference::all_reduce<Q, C> ref(P);
  if constexpr (C::keeps_state) {
    if (k.closes) ref.close_chain(ri, ro, n, epi, &rc.ref_chain());
    else ref(ri, ro, n, epi, &rc.ref_chain());
  } else {
    ref(ri, ro, n, epi);
  }
  for (int r = 0; r < P; ++r) {
    INFO("rank " << r << " of " << P << ", " << tokens << " x " << hidden << ", seed " << seed() << ", " << Transport::name
                 << " " << Q::name << "<"
                 << Q::bits << "," << Q::group << "> " << C::name << " " << type_name<T>() << (k.in_place ? " in place" : "")
                 << (k.deferred ? " deferred" : "") << (k.closes ? " closing" : ""));
    CHECK(first_mismatch((k.in_place ? rc.in(r) : rc.out(r)).download(n), want[r]) == -1);
    CHECK(first_mismatch(x.d_residual[r].download(n), x.residual[r]) == -1);
  }
}

/// Row shapes: hidden from one chunk to the largest, tokens from a decode step to many rows a warp.
const std::pair<size_t, size_t> shapes[] = {{1, 8},     {3, 24},   {1, 4096}, {2, 16384}, {7, 2056},
                                            {64, 640},  {5, 5120}, {129, 96}, {600, 128}, {33, 2048}};

TEST_CASE("fused epilogue, 4-bit + error feedback: every row shape, in place, deferred, closing") {
  reference_check<za4, ef16, bf16> rc(600 * 128 + 2 * 16384);
  for (const auto& s : shapes) fused_step(rc, s.first, s.second);
  fused_step(rc, 9, 4096, {true, false, false});
  fused_step(rc, 9, 4096, {false, true, false});
  fused_step(rc, 9, 4096, {false, false, true});
  fused_step(rc, 9, 4096);  // a fresh chain after the closing call
}

TEST_CASE("fused epilogue under the recommended default (rotated, clipped, int8 state)") {
  reference_check<echo::default_quantizer, ef8, bf16> rc(64 * 4096);
  for (int k = 0; k < 3; ++k) fused_step(rc, 64, 4096);
  fused_step(rc, 3, 2048);
  fused_step(rc, 64, 4096, {false, false, true});
}

TEST_CASE("fused epilogue, other element types and quantizers") {
  reference_check<echo::quant::zero_aware<8, 64>, echo::comp::none, echo::half_t> h(40 * 1024);
  fused_step(h, 40, 1024);
  fused_step(h, 1, 16384 / 2);
  reference_check<echo::quant::symmetric<4, 32>, echo::comp::none, float> f(17 * 512);
  fused_step(f, 17, 512);
  fused_step(f, 2, 4096, {true, false, false}, 0.0f);
  // quant::none through the pipeline (forced: no one-shot)
  reference_check<echo::quant::none, echo::comp::none, bf16> p(100 * 2048);
  fused_step(p, 100, 2048);
}

TEST_CASE("fused epilogue on the one-shot path (decode sizes)") {
  echo::all_reduce_options opt;
  opt.unquantized_below_bytes = 1 << 20;
  reference_check<echo::quant::none, echo::comp::none, bf16> rc(128 * 4096, opt);
  for (size_t tokens : {1, 2, 4, 8, 32, 128}) fused_step(rc, tokens, 4096);
  fused_step(rc, 5, 8192, {true, false, false});
  fused_step(rc, 3, 1000 + 8);
}

/// A fused call captured in a CUDA graph once, replayed on fresh inputs and residuals.
void graph_replays(const echo::all_reduce_options& opt) {
  const size_t tokens = 16, hidden = 4096, n = tokens * hidden;
  reference_check<za4, ef16, bf16> rc(n, opt);
  const int P = rc.ranks();
  std::vector<int> devices;
  for (int r = 0; r < P; ++r) devices.push_back(rc.in(r).device);
  rows_of<bf16> x = upload_rows<bf16>(rc.random(), devices, n, hidden);
  std::vector<cudaGraphExec_t> execs(static_cast<size_t>(P));
  for (int r = 0; r < P; ++r) {
    ECHO_TEST_CUDA(cudaSetDevice(devices[r]));
    cudaGraph_t g;
    ECHO_TEST_CUDA(cudaStreamBeginCapture(rc.stream(r), cudaStreamCaptureModeThreadLocal));
    const echo::epilogue::residual_rms_norm<bf16> e{x.d_residual[r].ptr, x.d_weight[r].ptr, hidden, 1e-6f};
    const echo::status s = rc.ar(r)(rc.in(r).ptr, rc.out(r).ptr, n, rc.stream(r), e, rc.chain(r));
    ECHO_TEST_CUDA(cudaStreamEndCapture(rc.stream(r), &g));
    REQUIRE(s == echo::status::success);
    ECHO_TEST_CUDA(cudaGraphInstantiate(&execs[r], g, 0));
    ECHO_TEST_CUDA(cudaGraphDestroy(g));
  }
  echo::reference::all_reduce<za4, ef16> ref(P);
  for (int it = 0; it < 20; ++it) {
    const auto host_in = rc.upload_random(n);
    for (int r = 0; r < P; ++r) {
      x.residual[r] = random_elements<bf16>(rc.random(), n);
      x.d_residual[r].upload(x.residual[r]);
    }
    for (int r = 0; r < P; ++r) {
      ECHO_TEST_CUDA(cudaSetDevice(devices[r]));
      ECHO_TEST_CUDA(cudaGraphLaunch(execs[r], rc.stream(r)));
    }
    for (int r = 0; r < P; ++r) {
      ECHO_TEST_CUDA(cudaSetDevice(devices[r]));
      ECHO_TEST_CUDA(cudaStreamSynchronize(rc.stream(r)));
      REQUIRE(rc.ar(r).check() == echo::status::success);
    }
    std::vector<std::vector<bf16>> want(static_cast<size_t>(P), std::vector<bf16>(n));
    std::vector<const bf16*> ri;
    std::vector<bf16*> ro;
    std::vector<echo::epilogue::residual_rms_norm<bf16>> epi;
    for (int r = 0; r < P; ++r) {
      ri.push_back(host_in[r].data());
      ro.push_back(want[r].data());
      epi.push_back({x.residual[r].data(), x.weight[r].data(), hidden, 1e-6f});
    }
    ref(ri, ro, n, epi, &rc.ref_chain());
    for (int r = 0; r < P; ++r) {
      INFO("replay " << it << ", rank " << r << ", seed " << seed());
      CHECK(first_mismatch(rc.out(r).download(n), want[r]) == -1);
      CHECK(first_mismatch(x.d_residual[r].download(n), x.residual[r]) == -1);
    }
  }
  for (int r = 0; r < P; ++r) {
    cudaSetDevice(devices[r]);
    cudaGraphExecDestroy(execs[r]);
  }
}

/// Options with the rows in the all-reduce's last launch at the sizes of `band`, elsewhere as a
/// launch of their own.
echo::all_reduce_options rows_in(echo::tuning::size_band band) {
  echo::all_reduce_options opt;
  opt.epilogue_in_launch_bytes = band;
  return opt;
}

constexpr echo::tuning::size_band every_size{0, echo::tuning::never}, no_size{};

}  // namespace

TEST_CASE("fused epilogue in a CUDA graph: captured once, replayed on fresh inputs and residuals") {
  graph_replays(rows_in(every_size));
  graph_replays(rows_in(no_size));  // the rows' own launch captured after the pipeline's
}

TEST_CASE("fused epilogue with its rows as a launch of their own (options.epilogue_in_launch_bytes)") {
  // every call: the same bits as the rows in the last launch
  reference_check<za4, ef16, bf16> rc(600 * 128 + 2 * 16384, rows_in(no_size));
  for (const auto& s : shapes) fused_step(rc, s.first, s.second);
  fused_step(rc, 9, 4096, {true, false, false});
  fused_step(rc, 9, 4096, {false, true, false});
  fused_step(rc, 9, 4096, {false, false, true});
  // in the launch from 32 KiB to 128 KiB (a row: 8 KiB): calls on either side of both edges and
  // on them, one chain
  reference_check<echo::default_quantizer, ef8, bf16> mixed(64 * 4096, rows_in({32 << 10, 128 << 10}));
  for (size_t tokens : {64, 2, 16, 3, 8, 4, 15, 64, 8}) fused_step(mixed, tokens, 4096);
  // rank-local: ranks that disagree still agree on every bit
  auto opt = [](int rank) { return rows_in(rank == 0 ? no_size : every_size); };
  reference_check<za4, ef16, bf16> split(16 * 4096, opt);
  for (size_t tokens : {16, 5, 16}) fused_step(split, tokens, 4096);
}

TEST_CASE("fused epilogue misuse: refused before anything runs, the chain untouched") {
  const size_t tokens = 4, hidden = 1024, n = tokens * hidden;
  reference_check<za4, ef16, bf16> rc(n);
  rc.step(n);  // a chain with stored errors
  const int P = rc.ranks();
  std::vector<int> devices;
  for (int r = 0; r < P; ++r) devices.push_back(rc.in(r).device);
  rows_of<bf16> x = upload_rows<bf16>(rc.random(), devices, n, hidden);
  auto& ar = rc.ar(0);
  bf16* res = x.d_residual[0].ptr;
  const bf16* w = x.d_weight[0].ptr;
  using E = echo::epilogue::residual_rms_norm<bf16>;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const struct {
    E e;
    size_t n;
    const char* why;
  } bad[] = {
      {{res, w, 1000 + 4, 1e-6f}, n, "epilogue.hidden: must be a positive multiple of 8"},
      {{res, w, 0, 1e-6f}, n, "epilogue.hidden: must be a positive multiple of 8"},
      {{res, w, 16384 + 8, 1e-6f}, n, "epilogue.hidden: above 16384"},
      {{res, w, hidden, 1e-6f}, n - 8, "epilogue.hidden: n is not a whole number of rows"},
      {{res, w, hidden, -1.0f}, n, "epilogue.epsilon: must be finite and >= 0"},
      {{res, w, hidden, nan}, n, "epilogue.epsilon: must be finite and >= 0"},
      {{nullptr, w, hidden, 1e-6f}, n, "epilogue.residual: null"},
      {{res + 1, w, hidden, 1e-6f}, n, "epilogue.residual: not 16-byte aligned"},
      {{res, nullptr, hidden, 1e-6f}, n, "epilogue.weight: null"},
      {{rc.out(0).ptr, w, hidden, 1e-6f}, n, "epilogue.residual: overlaps in or out"},
      {{res, res + 8, hidden, 1e-6f}, n, "epilogue.weight: overlaps out or the residual"},
  };
  for (const auto& b : bad) {
    INFO(b.why);
    CHECK(ar(rc.in(0).ptr, rc.out(0).ptr, b.n, rc.stream(0), b.e, rc.chain(0)) == echo::status::invalid_argument);
    CHECK(std::string(ar.last_error()) == b.why);
  }
  // host memory that is not pinned: refused, never read inside a kernel
  std::vector<bf16> pageable(n);
  CHECK(ar(rc.in(0).ptr, rc.out(0).ptr, n, rc.stream(0), E{pageable.data(), w, hidden, 1e-6f}, rc.chain(0)) ==
        echo::status::invalid_argument);
  // nothing ran: the chain still follows the reference, call after call
  for (int k = 0; k < 3; ++k) fused_step(rc, tokens, hidden);
  rc.step(n);
}

TEST_CASE("fused epilogue: ranks that disagree on it fail with status::mismatch, not a wrong result") {
  const size_t n = 64 * 1024;
  reference_check<za4, echo::comp::none, bf16> rc(n);
  const int P = rc.ranks();
  std::vector<int> devices;
  for (int r = 0; r < P; ++r) devices.push_back(rc.in(r).device);
  rows_of<bf16> x = upload_rows<bf16>(rc.random(), devices, n, 1024);
  (void)rc.upload_random(n);
  std::vector<echo::status> st(static_cast<size_t>(P));
  rc.pool().run([&](int r) {
    // rank 0 normalises rows of 1024, the others rows of 512
    const echo::epilogue::residual_rms_norm<bf16> e{x.d_residual[r].ptr, x.d_weight[r].ptr, r == 0 ? 1024u : 512u, 1e-6f};
    st[r] = rc.ar(r)(rc.in(r).ptr, rc.out(r).ptr, n, rc.stream(r), e, rc.chain(r));
  });
  for (int r = 0; r < P; ++r) {
    REQUIRE(st[r] == echo::status::success);
    ECHO_TEST_CUDA(cudaSetDevice(devices[r]));
    ECHO_TEST_CUDA(cudaStreamSynchronize(rc.stream(r)));
    CHECK(rc.ar(r).check() == echo::status::mismatch);
  }
}

TEST_CASE("fused epilogue over transport::nccl (a launch of its own after the call)") {
  using nccl = echo::transport::nccl::tag;
  if (!runnable<nccl>()) return;
  reference_check<za4, ef16, bf16, nccl> rc(64 * 2048);
  for (int k = 0; k < 3; ++k) fused_step(rc, 64, 2048);
  fused_step(rc, 3, 4096, {false, true, false});
  fused_step(rc, 5, 1024, {false, false, true});
}

TEST_CASE("fused epilogue at P = 1: the copy, then the rows") {
  const auto comms = echo::communicator::local({0}, false);
  const size_t tokens = 6, hidden = 3072, n = tokens * hidden;
  echo::all_reduce<za4, echo::transport::cuda_ipc::tag, ef16> ar(comms[0], n);
  echo::chain<ef16> chain(n);
  rng g(seed());
  const auto x = random_elements<bf16>(g, n);
  rows_of<bf16> r = upload_rows<bf16>(g, {0}, n, hidden);
  device_buffer<bf16> in(0, n), out(0, n);
  in.upload(x);
  const echo::epilogue::residual_rms_norm<bf16> e{r.d_residual[0].ptr, r.d_weight[0].ptr, hidden, 1e-6f};
  REQUIRE(ar(in.ptr, out.ptr, n, nullptr, e, &chain) == echo::status::success);
  ECHO_TEST_CUDA(cudaDeviceSynchronize());
  std::vector<bf16> want = x;
  echo::reference::residual_rms_norm(echo::epilogue::residual_rms_norm<bf16>{r.residual[0].data(), r.weight[0].data(), hidden, 1e-6f},
                                     want.data(), n);
  CHECK(first_mismatch(out.download(n), want) == -1);
  CHECK(first_mismatch(r.d_residual[0].download(n), r.residual[0]) == -1);
}
