// all-reduce-local: the README's snippet as a program. One process drives every local GPU
// (communicator::local, Echo objects constructed through for_each_rank), runs a few in-place
// 4-bit all-reduces with error feedback on one chain per rank, and checks every rank's output
// against echo::reference bit for bit. Exits 77 (skipped) with fewer than 2 GPUs.
//   all-reduce-local [n] [seed]
#include <echo/echo.cuh>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

using bf16 = echo::bfloat16_t;
using Q = echo::quant::zero_aware<4, 128>;     // 4-bit codes, groups of 128
using C = echo::comp::error_feedback<>;      // errors fed forward (as step8 codes, the default)
using AR = echo::all_reduce<Q, echo::transport::cuda_ipc::tag, C>;

namespace {

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

struct rank_state {
  cudaStream_t stream = nullptr;
  bf16* x = nullptr;  // the tensor, reduced in place
  std::unique_ptr<AR::chain_type> chain;
};

/// Runs `calls` calls on fresh inputs and compares each with echo::reference<RefQ, C>, whose
/// quantizer is the path the device takes at this size. Returns the number of ranks x calls
/// that differed.
template <class RefQ>
int run(std::vector<std::unique_ptr<AR>>& ars, std::vector<rank_state>& ranks, size_t n, int calls, uint64_t seed) {
  const int P = static_cast<int>(ranks.size());
  const echo::reference::all_reduce<RefQ, C> ref(P);
  echo::reference::chain_state<C> ref_chain(P, n);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::vector<bf16>> in(P, std::vector<bf16>(n)), want(P, std::vector<bf16>(n));
  std::vector<bf16> got(n);  // one rank's output, downloaded
  int bad = 0;
  for (int call = 1; call <= calls; ++call) {
    if (call == calls) {  // a pass boundary: the next call starts a new chain
      for (int r = 0; r < P; ++r) check_cuda(ranks[r].chain->reset(ranks[r].stream), "chain.reset");
      ref_chain.reset();
    }
    for (int r = 0; r < P; ++r) {
      for (auto& v : in[r]) v = echo::element_traits<bf16>::from_float(normal(rng));
      check_cuda(cudaSetDevice(r), "cudaSetDevice");
      check_cuda(cudaMemcpyAsync(ranks[r].x, in[r].data(), n * sizeof(bf16), cudaMemcpyHostToDevice, ranks[r].stream),
                 "upload");
    }
    // Stream-ordered, never throws: one thread may launch every rank's call.
    for (int r = 0; r < P; ++r) {
      const echo::status s = (*ars[r])(ranks[r].x, ranks[r].x, n, ranks[r].stream, ranks[r].chain.get());
      if (s != echo::status::success) {
        std::fprintf(stderr, "all-reduce-local: rank %d, call %d: %s\n", r, call, echo::to_string(s));
        return P * calls;
      }
    }
    std::vector<const bf16*> ref_in;
    std::vector<bf16*> ref_out;
    for (int r = 0; r < P; ++r) ref_in.push_back(in[r].data()), ref_out.push_back(want[r].data());
    ref(ref_in, ref_out, n, &ref_chain);

    double err2 = 0, norm2 = 0;
    for (size_t k = 0; k < n; ++k) {
      double exact = 0;
      for (int r = 0; r < P; ++r) exact += echo::element_traits<bf16>::to_float(in[r][k]);
      const double d = echo::element_traits<bf16>::to_float(want[0][k]) - exact;
      err2 += d * d;
      norm2 += exact * exact;
    }
    int differ = 0;
    for (int r = 0; r < P; ++r) {
      check_cuda(cudaSetDevice(r), "cudaSetDevice");
      check_cuda(cudaMemcpyAsync(got.data(), ranks[r].x, n * sizeof(bf16), cudaMemcpyDeviceToHost, ranks[r].stream),
                 "download");
      check_cuda(cudaStreamSynchronize(ranks[r].stream), "cudaStreamSynchronize");
      if (ars[r]->check() != echo::status::success) {
        std::fprintf(stderr, "all-reduce-local: rank %d, call %d: %s\n", r, call, echo::to_string(ars[r]->check()));
        return P * calls;
      }
      differ += std::memcmp(got.data(), want[r].data(), n * sizeof(bf16)) != 0;
    }
    bad += differ;
    std::printf("call %d%s: %s; relative RMS error against the exact sum %.5f\n", call,
                call == calls ? " (new chain)" : "",
                differ ? "DIFFERS from echo::reference" : "every rank bit-identical to echo::reference",
                std::sqrt(err2 / norm2));
  }
  return bad;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines survive a crash when ctest pipes the output
  const size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : (size_t(3) << 20) + 37;  // 6 MiB of bf16
  const uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1;
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess) gpus = 0;
  if (gpus < 2) {
    std::printf("SKIPPED: needs 2 GPUs (found %d)\n", gpus);
    return 77;
  }
  const int P = std::min(gpus, 8);  // one node
  std::vector<int> devices(P);
  std::iota(devices.begin(), devices.end(), 0);

  try {
    // Who the ranks are: every local GPU, in this process.
    std::vector<echo::communicator> comms = echo::communicator::local(devices, /*with_nccl=*/false);
    // Construction is collective: one thread per rank.
    std::vector<std::unique_ptr<AR>> ars(P);
    echo::for_each_rank(comms, [&](const echo::communicator& c) { ars[c.rank()] = std::make_unique<AR>(c, n); });

    std::vector<rank_state> ranks(P);
    for (int r = 0; r < P; ++r) {
      check_cuda(cudaSetDevice(r), "cudaSetDevice");
      check_cuda(cudaStreamCreateWithFlags(&ranks[r].stream, cudaStreamNonBlocking), "cudaStreamCreate");
      check_cuda(cudaMalloc(&ranks[r].x, n * sizeof(bf16)), "cudaMalloc");
      ranks[r].chain = std::make_unique<AR::chain_type>(n);  // one per residual stream, on device r
    }

    cudaDeviceProp prop{};
    check_cuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
    const bool quantized = n * sizeof(bf16) >= ars[0]->unquantized_below_bytes();
    const int calls = 4;
    std::printf("all-reduce-local: %d GPUs (%s), one process; all_reduce<zero_aware<4, 128>, cuda_ipc, "
                "error_feedback<bf16>>\n%zu bf16 values a rank (%.2f MiB), in place, %d calls on one chain per rank "
                "(the %s path at this size), checked against echo::reference\n",
                P, prop.name, n, n * sizeof(bf16) / 1048576.0, calls, quantized ? "4-bit" : "unquantized 16-bit");
    const int bad = quantized ? run<Q>(ars, ranks, n, calls, seed) : run<echo::quant::none>(ars, ranks, n, calls, seed);

    for (int r = 0; r < P; ++r) {
      cudaSetDevice(r);
      ranks[r].chain.reset();
      cudaFree(ranks[r].x);
      cudaStreamDestroy(ranks[r].stream);
    }
    if (bad) {
      std::printf("FAILED: %d rank-calls differ from echo::reference\n", bad);
      return 1;
    }
    std::printf("ok\n");
    return 0;
  } catch (const std::exception& e) {  // echo::error from setup, or a CUDA call above
    std::fprintf(stderr, "all-reduce-local: %s\n", e.what());
    return 1;
  }
}
