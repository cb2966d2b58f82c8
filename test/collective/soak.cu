// The soak test: long random sequences of calls on long-lived objects, every call of every rank
// checked against echo::reference bit for bit. Objects of several configurations live for the
// whole run and are called in random order with random sizes (tiny to a few million elements,
// around the dispatch size and the quantizer's groups), random element types, in place or not,
// fused or deferred state updates, chain resets, over both transports; nothing is reset between
// calls but what a user would reset. Layout changes between calls of one object are the point
// (docs/fault-matrix.md, "stale flags").
//
// ECHO_SOAK_CALLS (default 10000) checked calls a transport; ECHO_TEST_SEED replays a run.
#include "support/gpu_harness.cuh"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace {

using namespace echo_test;
using bf16 = echo::bfloat16_t;

struct tally {
  size_t calls = 0, checked = 0, mismatches = 0, failures = 0, elements = 0;
  std::vector<std::string> first;  // the first few mismatches, for the log
};

struct soak_object {
  virtual ~soak_object() = default;
  virtual std::string name() const = 0;
  virtual void step(rng& r, tally& t) = 0;
};

/// A random n: mostly small, often mid-sized, sometimes at the edges that change a layout
/// (the dispatch size, one group more or less), rarely large (the host reference's time bounds
/// how many calls a run can check: most are small on purpose).
inline size_t draw_n(rng& r, size_t max_n, size_t group, size_t dispatch_elems) {
  const double u = r.uniform(0.0f, 1.0f);
  size_t n;
  if (u < 0.75) n = static_cast<size_t>(r.log_uniform(0.0f, 4.3f));
  else if (u < 0.90) n = static_cast<size_t>(r.log_uniform(4.3f, 5.3f));
  else if (u < 0.965) n = std::max<size_t>(1, (r.uniform_int<size_t>(1, 64) * group) + r.uniform_int<int>(-2, 2));
  else if (u < 0.995 && dispatch_elems) n = dispatch_elems + r.uniform_int<int>(-3, 3) * 8;
  else n = static_cast<size_t>(r.log_uniform(5.3f, 6.6f));
  return std::min(std::max<size_t>(n, 1), max_n);
}

template <class Q, class C, class Transport>
class soak_of : public soak_object {
  using AR = echo::all_reduce<Q, Transport, C>;
  using chain_t = typename AR::chain_type;

 public:
  soak_of(std::string label, size_t max_n, echo::all_reduce_options opt)
      : label_(std::move(label)), max_n_(max_n), P_(static_cast<int>(comms_for<Transport>()->size())),
        ars_(make_all<AR, Transport>(max_n, opt)), ref_q_(P_), ref_none_(P_), ref_exact_(P_), ref_chain_(P_, max_n), pool_(P_) {
    const auto devs = rank_devices(P_);
    for (int r = 0; r < P_; ++r) {
      cudaSetDevice(devs[r]);
      for (auto& s : streams_[r]) REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
      if constexpr (C::keeps_state) chains_.push_back(std::make_unique<chain_t>(max_n));
      in_.emplace_back(devs[r], max_n * 4);
      out_.emplace_back(devs[r], max_n * 4);
    }
    unquantized_below_ = ars_[0]->unquantized_below_bytes();
  }
  ~soak_of() override {
    for (int r = 0; r < P_; ++r) {
      cudaSetDevice(in_[r].device);
      for (auto s : streams_[r]) cudaStreamSynchronize(s), cudaStreamDestroy(s);
    }
  }
  std::string name() const override { return label_; }

  void step(rng& r, tally& t) override {
    const int type = r.uniform_int<int>(0, 2);
    if (type == 0) run<float>(r, t, echo::dtype::f32);
    else if (type == 1) run<echo::half_t>(r, t, echo::dtype::f16);
    else run<bf16>(r, t, echo::dtype::bf16);
  }

 private:
  template <class T>
  void run(rng& r, tally& t, echo::dtype type) {
    const size_t n = draw_n(r, max_n_, static_cast<size_t>(Q::group > 1 ? Q::group : 256), unquantized_below_ / sizeof(T));
    const bool in_place = r.coin(0.3);
    const bool deferred = C::keeps_state && !in_place && r.coin(0.25);
    const int s = r.uniform_int<int>(0, 1);  // alternate streams: the object orders its calls
    if (C::keeps_state && r.coin(0.05)) {  // a pass boundary
      for (int k = 0; k < P_; ++k) {
        cudaSetDevice(in_[k].device);
        if constexpr (C::keeps_state) REQUIRE(chains_[k]->reset(streams_[k][s]) == cudaSuccess);
      }
      ref_chain_.reset();
    }
    std::vector<std::vector<T>> x(static_cast<size_t>(P_));
    for (int k = 0; k < P_; ++k) {
      x[k] = random_elements<T>(r, n);
      cudaSetDevice(in_[k].device);
      REQUIRE(echo::detail::write_device_now(in_[k].ptr, x[k].data(), n * sizeof(T)) == cudaSuccess);
    }
    std::vector<echo::status> st(static_cast<size_t>(P_));
    const auto mode = deferred ? echo::state_update::deferred : echo::state_update::fused;
    pool_.run([&](int k) {
      T* in = reinterpret_cast<T*>(in_[k].ptr);
      T* out = in_place ? in : reinterpret_cast<T*>(out_[k].ptr);
      chain_t* ch = nullptr;
      if constexpr (C::keeps_state) ch = chains_[k].get();
      st[k] = (*ars_[k])(type, in, out, n, streams_[k][s], ch, mode);
    });
    // Every rank's call queued before any rank's update (ranks sharing a GPU in one process may
    // share a hardware work queue: docs/transports.md).
    if constexpr (C::keeps_state)
      if (deferred)
        pool_.run([&](int k) {
          if (st[k] == echo::status::success)
            st[k] = ars_[k]->update(reinterpret_cast<T*>(in_[k].ptr), n, streams_[k][s], *chains_[k]);
        });
    pool_.run([&](int k) {
      if (cudaStreamSynchronize(streams_[k][s]) != cudaSuccess) st[k] = echo::status::cuda_error;
      if (st[k] == echo::status::success) st[k] = ars_[k]->check();
    });
    ++t.calls;
    for (int k = 0; k < P_; ++k)
      if (st[k] != echo::status::success) {
        ++t.failures;
        if (t.first.size() < 8) t.first.push_back(label_ + ": rank " + std::to_string(k) + " returned " + echo::to_string(st[k]));
        return;
      }
    // the reference, on the path the call took
    std::vector<std::vector<T>> want(static_cast<size_t>(P_), std::vector<T>(n));
    std::vector<const T*> ri;
    std::vector<T*> ro;
    for (int k = 0; k < P_; ++k) ri.push_back(x[k].data()), ro.push_back(want[k].data());
    const bool unquantized = n * sizeof(T) < unquantized_below_;
    const bool exact = unquantized && std::string(Transport::name) == "nccl";  // NCCL's own all-reduce
    // cuda_ipc's one-shot kernel: exact terms, rounded once, with or without a compensator
    const bool oneshot = unquantized && !exact && n * sizeof(T) <= oneshot_bytes();
    // Neither injects quantization error: a chain passes through them untouched.
    if (exact) {
      ref_exact_(ri, ro, n);
    } else if (oneshot) {
      ref_exact_(ri, ro, n);  // the exact sum rounded once, as the reference's none path without a chain
    } else if constexpr (C::keeps_state) {
      if (unquantized) ref_none_(ri, ro, n, &ref_chain_);
      else ref_q_(ri, ro, n, &ref_chain_);
    } else {
      if (unquantized) ref_none_(ri, ro, n);
      else ref_q_(ri, ro, n);
    }
    if (exact && P_ > 2) return;  // NCCL's ring rounds each partial sum: exact, not the reference's bits
    ++t.checked;
    t.elements += n;
    for (int k = 0; k < P_; ++k) {
      std::vector<T> got(n);
      cudaSetDevice(in_[k].device);
      const unsigned char* src = in_place ? in_[k].ptr : out_[k].ptr;
      REQUIRE(cudaMemcpy(got.data(), src, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
      const size_t bad = first_difference(got.data(), want[k].data(), n);
      if (bad == n) continue;
      size_t wrong = 0;
      for (size_t i = bad; i < n; ++i) wrong += !same_bits(got[i], want[k][i]);
      ++t.mismatches;
      if (t.first.size() < 8) {
        char line[512];
        std::snprintf(line, sizeof line, "%s: %s n=%zu %s%s rank %d: %zu wrong from %zu (device %g, reference %g)",
                      label_.c_str(), type_name<T>().c_str(), n, in_place ? "in place" : "out of place",
                      deferred ? " deferred" : "", k, wrong, bad, widen(got[bad]), widen(want[k][bad]));
        t.first.push_back(line);
      }
      break;
    }
  }

  std::string label_;
  size_t max_n_;
  int P_;
  std::vector<std::unique_ptr<AR>> ars_;
  echo::reference::all_reduce<Q, C> ref_q_;
  echo::reference::all_reduce<echo::quant::none, C> ref_none_;
  echo::reference::all_reduce<echo::quant::none> ref_exact_;  // no compensator: NCCL's and the one-shot's sum
  echo::reference::chain_state<C> ref_chain_;
  rank_pool pool_;
  cudaStream_t streams_[8][2] = {};
  std::vector<std::unique_ptr<chain_t>> chains_;
  std::vector<device_buffer<unsigned char>> in_, out_;
  size_t unquantized_below_ = 0;

  /// The largest message cuda_ipc serves by its one-shot kernel.
  static constexpr size_t oneshot_bytes() {
    if constexpr (std::string_view(Transport::name) != "cuda_ipc") {
      return 0;
    } else {
      return std::remove_reference_t<decltype(std::declval<AR&>().engine())>::oneshot_bytes;
    }
  }
};

/// wide, mid: options.wide_policy_from_bytes, mid_policy_from_bytes (unset: the dispatch table's);
/// small values make the object's calls switch between the pipeline policies at random.
echo::all_reduce_options options(std::optional<size_t> unquantized_below, size_t workspace = 0,
                                 std::optional<size_t> wide = {}, std::optional<size_t> mid = {}) {
  echo::all_reduce_options o;
  o.unquantized_below_bytes = unquantized_below;
  if (workspace) o.workspace_bytes = workspace;
  o.wide_policy_from_bytes = wide;
  o.mid_policy_from_bytes = mid;
  o.spin_limit_seconds = 20;
  return o;
}

size_t soak_calls() {
  const char* e = std::getenv("ECHO_SOAK_CALLS");
  return e ? std::strtoull(e, nullptr, 10) : 10000;
}

void soak(std::vector<std::unique_ptr<soak_object>>& objects, const char* what) {
  rng r(seed());
  tally t;
  std::map<std::string, size_t> per;
  const auto t0 = std::chrono::steady_clock::now();
  const size_t target = soak_calls();
  while (t.checked < target && t.calls < 2 * target) {
    auto& o = objects[r.uniform_int<size_t>(0, objects.size() - 1)];
    o->step(r, t);
    ++per[o->name()];
    if (t.calls % 2500 == 0) {
      std::printf("soak %s: %zu calls, %zu checked, %zu mismatched, %zu failed, %.1f s\n", what, t.calls, t.checked,
                  t.mismatches, t.failures, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      std::fflush(stdout);
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("soak %s: P=%d, %zu calls, %zu checked (%zu elements), %zu mismatched, %zu failed, %.1f s, seed %llu\n", what,
              test_ranks(), t.calls, t.checked, t.elements, t.mismatches, t.failures, secs,
              static_cast<unsigned long long>(seed()));
  for (auto& [name, calls] : per) std::printf("  %-48s %zu calls\n", name.c_str(), calls);
  for (auto& line : t.first) std::printf("  FIRST: %s\n", line.c_str());
  std::fflush(stdout);
  CHECK(t.checked >= target);
  CHECK(t.mismatches == 0);
  CHECK(t.failures == 0);
}

}  // namespace

TEST_CASE("soak: cuda_ipc") {
  using namespace echo;
  using T = transport::cuda_ipc::tag;
  std::vector<std::unique_ptr<soak_object>> o;
  const size_t M = size_t(1) << 22;
  o.emplace_back(new soak_of<quant::zero_aware<4, 128>, comp::none, T>("za4g128 none dispatch", M, options(std::nullopt)));
  o.emplace_back(new soak_of<quant::zero_aware<4, 32>, comp::error_feedback<bf16>, T>("za4g32 ef(bf16) 160K wide>=48K", M, options(0, 160 << 10, 48 << 10)));
  o.emplace_back(new soak_of<quant::symmetric<8, 128>, comp::none, T>("sym8g128 none forced wide>=32K", M, options(0, 0, 32 << 10)));
  o.emplace_back(new soak_of<quant::zero_aware<4, 128>, comp::none, T>("za4g128 none (lean wide)>=32K", M, options(0, 0, 32 << 10)));
  o.emplace_back(new soak_of<quant::none, comp::none, T>("none none (16-bit pipeline) wide>=64K", M, options(0, 1 << 20, 64 << 10)));
  o.emplace_back(new soak_of<quant::naive_zero_point<4, 64>, comp::error_feedback<float>, T>("naive4g64 ef(f32)", M, options(0)));
  o.emplace_back(new soak_of<quant::zero_aware<4, 128>, comp::error_feedback<comp::int8_state>, T>("za4g128 ef(int8) dispatch", M, options(std::nullopt)));
  o.emplace_back(new soak_of<quant::zero_aware<8, 64>, comp::error_feedback<comp::int4_state>, T>("za8g64 ef(int4) 256K wide", M, options(0, 256 << 10, 0)));
  o.emplace_back(new soak_of<quant::zero_aware<3, 256>, comp::error_feedback<comp::int8_state>, T>("za3g256 ef(int8)", M, options(1 << 16)));
  o.emplace_back(new soak_of<quant::zero_aware<4, 128>, comp::error_feedback<comp::step8_state>, T>("za4g128 ef(step8) dispatch", M, options(std::nullopt)));
  o.emplace_back(new soak_of<quant::zero_aware<4, 128>, comp::error_feedback<comp::step8_state>, T>("za4g128 ef(step8) 192K mid>=64K wide>=2M", M, options(0, 192 << 10, 2 << 20, 64 << 10)));
  o.emplace_back(new soak_of<quant::zero_aware<4, 128>, comp::none, T>("za4g128 none mid>=16K", M, options(0, 0, std::nullopt, 16 << 10)));
  o.emplace_back(new soak_of<quant::symmetric<8, 32>, comp::error_feedback<comp::step4_state>, T>("sym8g32 ef(step4) 256K wide", M, options(0, 256 << 10, 0)));
  o.emplace_back(new soak_of<default_quantizer, default_compensator, T>("default (rot, clip, int8) dispatch", M, options(std::nullopt)));
  o.emplace_back(new soak_of<quant::rotated<quant::zero_aware<4, 64>>, comp::error_feedback<comp::step8_state>, T>("rot za4g64 ef(step8) mid>=16K", M, options(0, 0, std::nullopt, 16 << 10)));
  soak(o, "cuda_ipc");
}

TEST_CASE("soak: nccl") {
  using namespace echo;
  using T = transport::nccl::tag;
  if (!runnable<T>()) return;
  std::vector<std::unique_ptr<soak_object>> o;
  const size_t M = size_t(1) << 22;
  o.emplace_back(new soak_of<quant::zero_aware<4, 128>, comp::error_feedback<bf16>, T>("za4g128 ef(bf16) forced", M, options(0)));
  o.emplace_back(new soak_of<quant::symmetric<8, 32>, comp::none, T>("sym8g32 none 256K", M, options(0, 256 << 10)));
  o.emplace_back(new soak_of<quant::zero_aware<4, 64>, comp::error_feedback<comp::int8_state>, T>("za4g64 ef(int8) exact<1M", M, options(1 << 20)));
  o.emplace_back(new soak_of<quant::none, comp::none, T>("none none forced", M, options(0)));
  o.emplace_back(new soak_of<quant::zero_aware<4, 128>, comp::error_feedback<comp::step8_state>, T>("za4g128 ef(step8) forced", M, options(0)));
  o.emplace_back(new soak_of<default_quantizer, default_compensator, T>("default (rot, clip, int8) forced", M, options(0)));
  soak(o, "nccl");
}
