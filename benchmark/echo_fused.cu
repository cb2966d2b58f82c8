// echo-fused: the all-reduce with the residual + RMSNorm epilogue in the call, against the same
// all-reduce followed by the epilogue as a kernel of its own (epilogue::epilogue_kernel, the same
// row code, launched programmatically so that it is scheduled while the all-reduce drains: the
// strongest unfused pair Echo knows), and against the bare all-reduce, in one run. The fused call
// twice: its rows in the all-reduce's last launch, and as a launch of their own after it
// (options.epilogue_in_launch_bytes: every size and none; the dispatch table picks by size).
//
//   echo-fused [-g RANKS] [-b 8K] [-e 256M] [-f 4] [-H 4096] [-n 50] [-w 10] [-r 5] [-q default|none]
//
// echo::default_all_reduce (or quant::none, -q none) with the dispatch table's sizes: what a user
// gets. bf16 rows of H values (a message below one row is one row of all of it). Time: CUDA events
// around -n calls on every rank's stream, the slowest rank; the median of -r rounds that alternate
// the three variants. With more ranks than GPUs the ranks share them (rank r on GPU r % GPUs): the
// times are then kernel times with the ranks' kernels side by side, not link times.
#include <echo/echo.cuh>

#include "harness/sweep_args.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using bf16 = echo::bfloat16_t;

#define ECHO_FUSED_CUDA(expr)                                                                       \
  do {                                                                                              \
    const cudaError_t e_ = (expr);                                                                  \
    if (e_ != cudaSuccess) throw std::runtime_error(std::string(#expr) + ": " + cudaGetErrorString(e_)); \
  } while (0)

struct rank_buffers {
  int device = 0;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  bf16 *in = nullptr, *out = nullptr, *residual = nullptr, *weight = nullptr;
};

enum class variant { bare, unfused, fused_in, fused_own };
constexpr int variants = 4;
const char* const variant_name[variants] = {"bare", "unfused", "fused (rows in)", "fused (rows own)"};

template <class AR>
class bench {
 public:
  bench(const std::vector<echo::communicator>& comms, size_t max_elements, size_t hidden)
      : comms_(comms), ar_(comms.size()), own_(comms.size()), ch_(comms.size()), r_(comms.size()) {
    echo::all_reduce_options in, own;
    in.epilogue_in_launch_bytes = echo::tuning::size_band{0, echo::tuning::never};
    own.epilogue_in_launch_bytes = echo::tuning::size_band{};
    echo::for_each_rank(comms, [&](const echo::communicator& c) {
      ar_[static_cast<size_t>(c.rank())] = std::make_unique<AR>(c, max_elements, in);
      own_[static_cast<size_t>(c.rank())] = std::make_unique<AR>(c, max_elements, own);
    });
    std::mt19937 g(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<bf16> h(max_elements), w(hidden);
    for (auto& x : h) x = echo::element_traits<bf16>::from_float(nd(g));
    for (auto& x : w) x = echo::element_traits<bf16>::from_float(1.0f + 0.1f * nd(g));
    for (size_t r = 0; r < comms.size(); ++r) {
      rank_buffers& b = r_[r];
      b.device = comms[r].device();
      ECHO_FUSED_CUDA(cudaSetDevice(b.device));
      ECHO_FUSED_CUDA(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking));
      ECHO_FUSED_CUDA(cudaEventCreate(&b.start));
      ECHO_FUSED_CUDA(cudaEventCreate(&b.stop));
      for (bf16** p : {&b.in, &b.out, &b.residual}) ECHO_FUSED_CUDA(cudaMalloc(p, max_elements * sizeof(bf16)));
      ECHO_FUSED_CUDA(cudaMalloc(&b.weight, hidden * sizeof(bf16)));
      ECHO_FUSED_CUDA(cudaMemcpy(b.in, h.data(), max_elements * sizeof(bf16), cudaMemcpyHostToDevice));
      ECHO_FUSED_CUDA(cudaMemcpy(b.residual, h.data(), max_elements * sizeof(bf16), cudaMemcpyHostToDevice));
      ECHO_FUSED_CUDA(cudaMemcpy(b.weight, w.data(), hidden * sizeof(bf16), cudaMemcpyHostToDevice));
      if constexpr (AR::compensator::keeps_state) ch_[r] = std::make_unique<typename AR::chain_type>(max_elements);
      int sms = 0;
      ECHO_FUSED_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, b.device));
      sms_ = sms;
    }
  }
  ~bench() {
    for (size_t r = 0; r < r_.size(); ++r) {
      cudaSetDevice(r_[r].device);
      cudaStreamSynchronize(r_[r].stream);
      ch_[r].reset();
      ar_[r].reset();
      own_[r].reset();
      for (bf16* p : {r_[r].in, r_[r].out, r_[r].residual, r_[r].weight}) cudaFree(p);
      cudaEventDestroy(r_[r].start);
      cudaEventDestroy(r_[r].stop);
      cudaStreamDestroy(r_[r].stream);
    }
  }

  /// Microseconds a call of `v` takes (the slowest rank over `iters` calls).
  double time(variant v, size_t n, size_t hidden, int iters, int warmup) {
    for (int i = 0; i < warmup; ++i) call_all(v, n, hidden);
    for (auto& b : r_) {
      ECHO_FUSED_CUDA(cudaSetDevice(b.device));
      ECHO_FUSED_CUDA(cudaEventRecord(b.start, b.stream));
    }
    for (int i = 0; i < iters; ++i) call_all(v, n, hidden);
    double worst = 0;
    for (size_t r = 0; r < r_.size(); ++r) {
      rank_buffers& b = r_[r];
      ECHO_FUSED_CUDA(cudaSetDevice(b.device));
      ECHO_FUSED_CUDA(cudaEventRecord(b.stop, b.stream));
      ECHO_FUSED_CUDA(cudaEventSynchronize(b.stop));
      const AR& ar = v == variant::fused_own ? *own_[r] : *ar_[r];
      if (const echo::status st = ar.check(); st != echo::status::success)
        throw std::runtime_error(std::string(variant_name[static_cast<int>(v)]) +
                                 " calls of " + std::to_string(n) + " values failed on rank " + std::to_string(r) + ": " +
                                 echo::to_string(st));
      float ms = 0;
      ECHO_FUSED_CUDA(cudaEventElapsedTime(&ms, b.start, b.stop));
      worst = std::max(worst, 1e3 * ms / iters);
    }
    return worst;
  }

 private:
  // Every rank's all-reduce is queued before any rank's separate epilogue: ranks sharing a GPU in
  // one process may share a hardware queue, where a rank's epilogue (waiting for its own call)
  // queued ahead of a peer's call (which its own call waits for) would deadlock until the spin
  // limit (transport/cuda_ipc/engine.cuh, ranks_per_context). Processes of one GPU each do not.
  void call_all(variant v, size_t n, size_t hidden) {
    for (size_t r = 0; r < r_.size(); ++r) {
      rank_buffers& b = r_[r];
      AR& ar = v == variant::fused_own ? *own_[r] : *ar_[r];
      ECHO_FUSED_CUDA(cudaSetDevice(b.device));
      typename AR::chain_type* ch = nullptr;
      if constexpr (AR::compensator::keeps_state) ch = ch_[r].get();
      const echo::epilogue::residual_rms_norm<bf16> e{b.residual, b.weight, hidden, 1e-6f};
      const bool fused = v == variant::fused_in || v == variant::fused_own;
      const echo::status s = fused ? ar(b.in, b.out, n, b.stream, e, ch) : ar(b.in, b.out, n, b.stream, ch);
      if (s != echo::status::success)
        throw std::runtime_error("rank " + std::to_string(r) + ": " + echo::to_string(s) + " (" + ar.last_error() + ")");
    }
    if (v != variant::unfused) return;
    for (size_t r = 0; r < r_.size(); ++r) {
      rank_buffers& b = r_[r];
      ECHO_FUSED_CUDA(cudaSetDevice(b.device));
      const echo::epilogue::job<bf16> j{echo::epilogue::kind::residual_rms_norm, b.residual, b.weight,
                                        static_cast<uint32_t>(hidden), 1e-6f};
      ECHO_FUSED_CUDA(echo::epilogue::launch_epilogue<echo::epilogue::sum_at::out>(j, b.out, n, sms_, b.stream, true));
    }
  }

  std::vector<echo::communicator> comms_;
  std::vector<std::unique_ptr<AR>> ar_, own_;  // the rows in the last launch; as a launch of their own
  std::vector<std::unique_ptr<typename AR::chain_type>> ch_;
  std::vector<rank_buffers> r_;
  int sms_ = 1;
};

template <class AR>
void run(const std::vector<echo::communicator>& comms, echo::tuning::size_band table, const echo_bench::sweep_args& a,
         size_t hidden) {
  bench<AR> b(comms, std::max(a.hi / sizeof(bf16), hidden), hidden);
  std::printf("# %10s %9s %6s %10s %12s %10s %10s %10s %10s %6s\n", "size", "values", "rows", "bare(us)", "unfused(us)",
              "fused in", "fused own", "unfused /", "unfused /", "table");
  std::printf("# %10s %9s %6s %10s %12s %10s %10s %10s %10s %6s\n", "", "", "", "", "", "(us)", "(us)", "fused in",
              "fused own", "picks");
  for (size_t bytes = a.lo; bytes <= a.hi; bytes *= a.factor) {
    const size_t n = std::max(hidden, bytes / sizeof(bf16) / hidden * hidden);
    std::vector<double> t[variants];
    for (int k = 0; k < a.rounds; ++k)
      for (int v = 0; v < variants; ++v) t[v].push_back(b.time(static_cast<variant>(v), n, hidden, a.iters, a.warmup));
    double m[variants];
    for (int v = 0; v < variants; ++v) {
      std::sort(t[v].begin(), t[v].end());
      m[v] = t[v][t[v].size() / 2];
    }
    std::printf("  %10zu %9zu %6zu %10.2f %12.2f %10.2f %10.2f %9.3fx %9.3fx %6s\n", n * sizeof(bf16), n, n / hidden, m[0],
                m[1], m[2], m[3], m[1] / m[2], m[1] / m[3], table.holds(n * sizeof(bf16)) ? "in" : "own");
    std::fflush(stdout);
    if (a.factor <= 1) break;
  }
}

}  // namespace

int main(int argc, char** argv) {
  echo_bench::sweep_args a;
  a.lo = 8 << 10;
  a.hi = size_t(256) << 20;
  size_t hidden = 4096;
  if (const int code = echo_bench::parse_sweep(argc, argv, "echo-fused",
                                               "[-g RANKS] [-b 8K] [-e 256M] [-f 4] [-H 4096] [-n 50] [-w 10] [-r 5] [-q default|none]",
                                               "H:", a, [&](int c, const char* v) {
                                                 hidden = static_cast<size_t>(std::atoi(v));
                                                 return c == 'H';
                                               }))
    return code < 0 ? 0 : code;
  const int gpus = echo_bench::gpus_or_skip("echo-fused");
  if (gpus == 0) return 77;
  if (a.ranks > echo::transport::cuda_ipc::max_ranks || hidden == 0 || hidden % 8 || hidden > echo::epilogue::max_hidden ||
      (a.quant != "default" && a.quant != "none")) {
    std::fprintf(stderr, "echo-fused: bad flags\n");
    return 2;
  }
  const int ranks = a.ranks;
  std::vector<int> devices;
  for (int r = 0; r < ranks; ++r) devices.push_back(r % gpus);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("# echo-fused: %s, P = %d on %d GPU(s)%s, bf16 rows of %zu, -q %s, median of %d rounds of %d calls\n",
              prop.name, ranks, std::min(gpus, ranks), ranks > gpus ? " (ranks share GPUs: kernel time, not link time)" : "",
              hidden, a.quant.c_str(), a.rounds, a.iters);
  try {
    const auto comms = echo::communicator::local(devices, false);
    // The form the dispatch table picks at each size (the pipeline's; the one-shot kernel keeps
    // its rows in its launch).
    const auto table = echo::tuning::lookup_dispatch(prop.name, ranks, "cuda_ipc", "p2p").sizes.epilogue_in_launch;
    if (a.quant == "default") run<echo::default_all_reduce<>>(comms, table, a, hidden);
    else run<echo::all_reduce<echo::quant::none>>(comms, table, a, hidden);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "echo-fused: %s\n", e.what());
    return 1;
  }
  return 0;
}
