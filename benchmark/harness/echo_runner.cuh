// What the benchmarks time: echo::all_reduce<Q, Transport, C, Policy> on element type T, on every
// rank of a bench_context.
#pragma once

#include "context.cuh"
#include "runner_options.hpp"

#include <echo/echo.cuh>

#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace echo_bench {

/// echo::all_reduce<Q, Transport, C, Policy> on T, one object (and, with state, one chain) a rank.
template <class Q, class C, class T, class Transport = echo::transport::cuda_ipc::tag,
          class Policy = echo::tuning::default_policy>
class echo_runner final : public runner {
  using AR = echo::all_reduce<Q, Transport, C, Policy>;
  static constexpr bool stateful = C::keeps_state;
  struct no_chain {};
  using chain_t = std::conditional_t<stateful, typename AR::chain_type, no_chain>;
  // transport::nccl issues ncclSend/ncclRecv group calls inside every call: one thread a rank.
  static constexpr bool needs_threads = std::is_same<Transport, echo::transport::nccl::tag>::value;

 public:
  echo_runner(bench_context& ctx, const echo_runner_options& o)
      : ctx_(ctx), forced_(o.forced), threaded_(needs_threads || o.threads), ar_(static_cast<size_t>(ctx.size())),
        ch_(ar_.size()) {
    typename AR::options opt{};
    if (o.workspace_bytes) opt.workspace_bytes = o.workspace_bytes;
    if (o.forced) opt.unquantized_below_bytes = 0;
    opt.check_pointers = o.check_pointers;
    opt.wide_policy_from_bytes = o.wide_from;
    opt.mid_policy_from_bytes = o.mid_from;
    try {
      echo::for_each_rank(ctx.comms(), [&](const echo::communicator& c) {
        const size_t r = static_cast<size_t>(c.rank());  // each thread writes only its own slot
        ar_[r] = std::make_unique<AR>(c, o.max_elements, opt);
        if constexpr (stateful) ch_[r] = std::make_unique<chain_t>(o.max_elements);
      });
    } catch (...) {
      release();
      throw;
    }
  }
  ~echo_runner() override { release(); }

  bool per_rank_threads() const override { return threaded_; }

  void call_rank(int r, size_t n, bool in_place) override {
    if (!threaded_) {
      runner::call_rank(r, n, in_place);
    } else {
      const echo::status st = launch(r, n, in_place);
      if (st != echo::status::success) throw std::runtime_error(call_error(r, st));
    }
  }

  void call(size_t n, bool in_place) override {
    if constexpr (needs_threads)
      throw std::logic_error("echo_bench: a transport::nccl runner driven from one thread (would deadlock)");
    echo::status st = echo::status::success;
    int bad = -1;
    for (int r = 0; r < ctx_.size() && st == echo::status::success; ++r) {
      st = cudaSetDevice(ctx_.rank(r).device) != cudaSuccess ? echo::status::cuda_error : launch(r, n, in_place);
      if (st != echo::status::success) bad = r;
    }
    if (st != echo::status::success) throw std::runtime_error(call_error(bad, st));
  }

  void check() const override {
    for (size_t r = 0; r < ar_.size(); ++r) {
      const echo::status st = ar_[r]->check();
      if (st != echo::status::success)
        throw std::runtime_error("echo::all_reduce::check() on rank " + std::to_string(r) + ": " + echo::to_string(st));
    }
  }

  void reset_state() override {
    if constexpr (stateful)
      for (int r = 0; r < ctx_.size(); ++r) {
        ECHO_CUDA_TRY(cudaSetDevice(ctx_.rank(r).device));
        ECHO_CUDA_TRY(ch_[static_cast<size_t>(r)]->reset(ctx_.rank(r).stream));
      }
  }

  bool size_dispatch() const override { return !forced_; }

  std::string path(size_t bytes) const override {
    if (bytes < ar_[0]->unquantized_below_bytes()) return "none";
    if constexpr (!Q::quantizes) return "none";
    else return std::string(Q::name) + "<" + std::to_string(Q::bits) + "," + std::to_string(Q::group) + ">";
  }

 private:
  echo::status launch(int r, size_t n, bool in_place) {
    const rank_res& R = ctx_.rank(r);
    AR& ar = *ar_[static_cast<size_t>(r)];
    const T* in = static_cast<const T*>(in_place ? R.out : R.in);
    T* out = static_cast<T*>(R.out);
    if constexpr (stateful) return ar(in, out, n, R.stream, ch_[static_cast<size_t>(r)].get());
    else return ar(in, out, n, R.stream);
  }

  static std::string call_error(int r, echo::status st) {
    std::string msg = "echo::all_reduce on rank " + std::to_string(r) + ": " + echo::to_string(st);
    if (st == echo::status::cuda_error) msg += std::string(" (") + cudaGetErrorString(cudaGetLastError()) + ")";
    return msg;
  }

  void release() {
    for (int r = 0; r < ctx_.size(); ++r) {
      (void)cudaSetDevice(ctx_.rank(r).device);
      ch_[static_cast<size_t>(r)].reset();
      ar_[static_cast<size_t>(r)].reset();
    }
  }

  bench_context& ctx_;
  bool forced_;
  bool threaded_;
  std::vector<std::unique_ptr<AR>> ar_;
  std::vector<std::unique_ptr<chain_t>> ch_;
};

}  // namespace echo_bench
