// echo-sp: the sequence-parallel pair (echo::sequence_parallel's reduce_scatter and all_gather)
// against the all-reduce of the same message on the same object and, where every rank has a GPU
// of its own, against NCCL's bf16 reduce-scatter and all-gather, in one run.
//
//   echo-sp [-g RANKS] [-b 1M] [-e 256M] [-f 4] [-n 40] [-w 8] [-r 5] [-q default|zero_aware]
//
// bf16 messages of the given sizes (the reduce-scatter's input, the all-gather's output); -q
// default: echo::default_quantizer with its int8 error state (what a sequence-parallel run
// uses), zero_aware: 4-bit g128 with a bf16 error state; every size quantized (no dispatch). Time:
// CUDA events around -n calls on every rank's stream, the slowest rank; the median of -r rounds
// that alternate the variants; with nccl-tests' algbw and busbw (GB/s). With more ranks than GPUs
// the ranks share them (rank r on GPU r % GPUs): kernel times with the ranks' kernels side by
// side, not link times, and no NCCL.
#include <echo/echo.cuh>

#include "harness/sweep_args.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using bf16 = echo::bfloat16_t;

#define ECHO_SP_CUDA(expr)                                                                          \
  do {                                                                                              \
    const cudaError_t e_ = (expr);                                                                  \
    if (e_ != cudaSuccess) throw std::runtime_error(std::string(#expr) + ": " + cudaGetErrorString(e_)); \
  } while (0)

enum class variant { all_reduce, reduce_scatter, all_gather, nccl_reduce_scatter, nccl_all_gather };
constexpr int variants = 5;
const char* const variant_name[variants] = {"all_reduce", "reduce_scatter", "all_gather", "nccl reduce_scatter",
                                            "nccl all_gather"};

struct rank_buffers {
  int device = 0;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  bf16 *in = nullptr, *out = nullptr;
};

template <class SP>
class bench {
 public:
  bench(const std::vector<echo::communicator>& comms, size_t max_elements)
      : comms_(comms), sp_(comms.size()), ch_(comms.size()), r_(comms.size()) {
    echo::all_reduce_options opt;
    opt.unquantized_below_bytes = 0;  // the quantizer at every size
    echo::for_each_rank(comms, [&](const echo::communicator& c) {
      sp_[static_cast<size_t>(c.rank())] = std::make_unique<SP>(c, max_elements, opt);
    });
    std::mt19937 g(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<bf16> h(max_elements);
    for (auto& x : h) x = echo::element_traits<bf16>::from_float(nd(g));
    for (size_t r = 0; r < comms.size(); ++r) {
      rank_buffers& b = r_[r];
      b.device = comms[r].device();
      ECHO_SP_CUDA(cudaSetDevice(b.device));
      ECHO_SP_CUDA(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking));
      ECHO_SP_CUDA(cudaEventCreate(&b.start));
      ECHO_SP_CUDA(cudaEventCreate(&b.stop));
      ECHO_SP_CUDA(cudaMalloc(&b.in, max_elements * sizeof(bf16)));
      ECHO_SP_CUDA(cudaMalloc(&b.out, max_elements * sizeof(bf16)));
      ECHO_SP_CUDA(cudaMemcpy(b.in, h.data(), max_elements * sizeof(bf16), cudaMemcpyHostToDevice));
      if constexpr (SP::compensator::keeps_state) ch_[r] = std::make_unique<typename SP::chain_type>(max_elements);
    }
  }
  ~bench() {
    for (size_t r = 0; r < r_.size(); ++r) {
      cudaSetDevice(r_[r].device);
      cudaStreamSynchronize(r_[r].stream);
      ch_[r].reset();
      sp_[r].reset();
      cudaFree(r_[r].in);
      cudaFree(r_[r].out);
      cudaEventDestroy(r_[r].start);
      cudaEventDestroy(r_[r].stop);
      cudaStreamDestroy(r_[r].stream);
    }
  }

  /// Microseconds a call of `v` on a message of n values takes (the slowest rank over `iters`).
  double time(variant v, size_t n, int iters, int warmup) {
    for (int i = 0; i < warmup; ++i) call_all(v, n);
    for (auto& b : r_) {
      ECHO_SP_CUDA(cudaSetDevice(b.device));
      ECHO_SP_CUDA(cudaEventRecord(b.start, b.stream));
    }
    for (int i = 0; i < iters; ++i) call_all(v, n);
    double worst = 0;
    for (size_t r = 0; r < r_.size(); ++r) {
      rank_buffers& b = r_[r];
      ECHO_SP_CUDA(cudaSetDevice(b.device));
      ECHO_SP_CUDA(cudaEventRecord(b.stop, b.stream));
      ECHO_SP_CUDA(cudaEventSynchronize(b.stop));
      if (const echo::status st = sp_[r]->check(); st != echo::status::success)
        throw std::runtime_error(std::string(variant_name[static_cast<int>(v)]) + " of " + std::to_string(n) +
                                 " values failed on rank " + std::to_string(r) + ": " + echo::to_string(st));
      float ms = 0;
      ECHO_SP_CUDA(cudaEventElapsedTime(&ms, b.start, b.stop));
      worst = std::max(worst, 1e3 * ms / iters);
    }
    return worst;
  }

 private:
  void call_all(variant v, size_t n) {
    const size_t P = r_.size(), m = n / P;
    if (v == variant::nccl_reduce_scatter || v == variant::nccl_all_gather) {
      ECHO_NCCL_TRY(ncclGroupStart());
      for (size_t r = 0; r < P; ++r) {
        rank_buffers& b = r_[r];
        ncclComm_t c = comms_[r].nccl();
        if (v == variant::nccl_reduce_scatter) ECHO_NCCL_TRY(ncclReduceScatter(b.in, b.out, m, ncclBfloat16, ncclSum, c, b.stream));
        else ECHO_NCCL_TRY(ncclAllGather(b.in, b.out, m, ncclBfloat16, c, b.stream));
      }
      ECHO_NCCL_TRY(ncclGroupEnd());
      return;
    }
    for (size_t r = 0; r < P; ++r) {
      rank_buffers& b = r_[r];
      SP& sp = *sp_[r];
      ECHO_SP_CUDA(cudaSetDevice(b.device));
      typename SP::chain_type* ch = nullptr;
      if constexpr (SP::compensator::keeps_state) ch = ch_[r].get();
      const echo::status s = v == variant::all_reduce       ? sp(b.in, b.out, n, b.stream, ch)
                             : v == variant::reduce_scatter ? sp.reduce_scatter(b.in, b.out, n, b.stream, ch)
                                                            : sp.all_gather(b.in, b.out, m, b.stream);
      if (s != echo::status::success)
        throw std::runtime_error("rank " + std::to_string(r) + ": " + echo::to_string(s) + " (" + sp.last_error() + ")");
    }
  }

  std::vector<echo::communicator> comms_;
  std::vector<std::unique_ptr<SP>> sp_;
  std::vector<std::unique_ptr<typename SP::chain_type>> ch_;
  std::vector<rank_buffers> r_;
};

template <class SP>
void run(const std::vector<echo::communicator>& comms, bool nccl, const echo_bench::sweep_args& a) {
  const size_t P = comms.size(), unit = P * 256;  // P segments of whole groups (and of 16 bytes)
  bench<SP> b(comms, std::max(a.hi / sizeof(bf16) / unit * unit, unit));
  const int shown = nccl ? variants : 3;
  // nccl-tests' columns: algbw = message bytes / time; busbw = algbw x 2 (P - 1) / P for the
  // all-reduce, x (P - 1) / P for the reduce-scatter and the all-gather (the bytes each rank's link
  // carries, so the three compare on one scale).
  const auto bus = [P](int v) { return (v == 0 ? 2.0 : 1.0) * double(P - 1) / double(P); };
  std::printf("# %10s %10s", "size", "values");
  for (int v = 0; v < shown; ++v) std::printf(" %28s", variant_name[v]);
  std::printf(" %11s %16s\n", "(rs+ag)/ar", nccl ? "nccl/echo rs, ag" : "");
  std::printf("# %10s %10s", "(B)", "");
  for (int v = 0; v < shown; ++v) std::printf(" %10s %8s %8s", "time(us)", "algbw", "busbw");
  std::printf("\n");
  for (size_t bytes = a.lo; bytes <= a.hi; bytes *= a.factor) {
    const size_t n = std::max(unit, bytes / sizeof(bf16) / unit * unit);
    std::vector<double> t[variants];
    for (int k = 0; k < a.rounds; ++k)
      for (int v = 0; v < shown; ++v) t[v].push_back(b.time(static_cast<variant>(v), n, a.iters, a.warmup));
    double med[variants] = {};
    for (int v = 0; v < shown; ++v) {
      std::sort(t[v].begin(), t[v].end());
      med[v] = t[v][t[v].size() / 2];
    }
    std::printf("  %10zu %10zu", n * sizeof(bf16), n);
    for (int v = 0; v < shown; ++v) {
      const double algbw = double(n * sizeof(bf16)) / (med[v] * 1e3);  // GB/s
      std::printf(" %10.2f %8.1f %8.1f", med[v], algbw, algbw * bus(v));
    }
    std::printf(" %10.2fx", (med[1] + med[2]) / med[0]);
    if (nccl) std::printf(" %7.2fx %6.2fx", med[3] / med[1], med[4] / med[2]);
    std::printf("\n");
    std::fflush(stdout);
    if (a.factor <= 1) break;
  }
}

}  // namespace

int main(int argc, char** argv) {
  echo_bench::sweep_args a;
  a.lo = size_t(1) << 20;
  a.hi = size_t(256) << 20;
  a.iters = 40;
  a.warmup = 8;
  if (const int code = echo_bench::parse_sweep(argc, argv, "echo-sp",
                                               "[-g RANKS] [-b 1M] [-e 256M] [-f 4] [-n 40] [-w 8] [-r 5] [-q default|zero_aware]",
                                               "", a))
    return code < 0 ? 0 : code;
  const int gpus = echo_bench::gpus_or_skip("echo-sp");
  if (gpus == 0) return 77;
  if (a.ranks > echo::transport::cuda_ipc::max_ranks || (a.quant != "default" && a.quant != "zero_aware")) {
    std::fprintf(stderr, "echo-sp: bad flags\n");
    return 2;
  }
  const int ranks = a.ranks;
  const bool nccl = gpus >= ranks;  // NCCL refuses two ranks on one GPU
  std::vector<int> devices;
  for (int r = 0; r < ranks; ++r) devices.push_back(r % gpus);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("# echo-sp: %s, P = %d on %d GPU(s)%s, bf16, -q %s, median of %d rounds of %d calls\n", prop.name, ranks,
              std::min(gpus, ranks), nccl ? "" : " (ranks share GPUs: kernel time, not link time; no NCCL)",
              a.quant.c_str(), a.rounds, a.iters);
  try {
    const auto comms = echo::communicator::local(devices, nccl);
    if (a.quant == "default")
      run<echo::sequence_parallel<echo::default_quantizer, echo::transport::cuda_ipc::tag, echo::default_compensator>>(
          comms, nccl, a);
    else
      run<echo::sequence_parallel<echo::quant::zero_aware<4, 128>, echo::transport::cuda_ipc::tag,
                                  echo::comp::error_feedback<bf16>>>(comms, nccl, a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "echo-sp: %s\n", e.what());
    return 1;
  }
  return 0;
}
