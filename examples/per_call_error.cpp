// per-call-error: the error one Echo call adds, at P = 2, 4 and 8, on the host reference and, when
// built with CUDA and run where GPUs are, on the GPUs too (P ranks over the visible GPUs, several
// a GPU when P is larger: for correctness, not speed), with a check that both outputs agree bit
// for bit. Each value is quantized at most twice whatever P is, so the per-call error should not
// grow with P.
//
// For each P the same global data is reduced: 8 partials of n values ~ N(0, 1) in bf16; with
// P < 8 ranks, rank r holds the exact fp32 sum of partials r, r+P, ... rounded once to bf16 (so
// every P reduces nearly the same numbers). Printed: relative RMS error of the output against the
// exact (fp64) sum of what the ranks hold, per quantizer.
//   per-call-error [n] [seed]
#include <echo/echo.cuh>

#include <cmath>
#include <cstring>
#include <memory>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace {

using bf16 = echo::bfloat16_t;

/// Rank 0's output of one call on the host reference.
template <class Q>
std::vector<bf16> host_call(const std::vector<std::vector<bf16>>& x) {
  const int P = static_cast<int>(x.size());
  const size_t n = x[0].size();
  std::vector<std::vector<bf16>> out(x.size(), std::vector<bf16>(n));
  std::vector<const bf16*> in;
  std::vector<bf16*> o;
  for (int r = 0; r < P; ++r) in.push_back(x[r].data()), o.push_back(out[r].data());
  const echo::reference::all_reduce<Q> ar(P);
  ar(in, o, n);
  return out[0];
}

#if ECHO_HAS_CUDA
int gpus() {
  int g = 0;
  if (cudaGetDeviceCount(&g) != cudaSuccess) g = 0;
  (void)cudaGetLastError();
  return g;
}

/// Rank 0's output of one call on the GPUs (rank r on GPU r % gpus); empty when it failed.
template <class Q>
std::vector<bf16> device_call(const std::vector<std::vector<bf16>>& x) {
  const int P = static_cast<int>(x.size()), G = gpus();
  const size_t n = x[0].size();
  std::vector<int> devs;
  for (int r = 0; r < P; ++r) devs.push_back(r % G);
  auto comms = echo::communicator::local(devs, false);
  using AR = echo::all_reduce<Q>;
  std::vector<std::unique_ptr<AR>> ars(static_cast<size_t>(P));
  echo::all_reduce_options opt;
  opt.unquantized_below_bytes = 0;  // the quantizer itself, not the size dispatch
  echo::for_each_rank(comms, [&](const echo::communicator& c) { ars[c.rank()] = std::make_unique<AR>(c, n, opt); });
  std::vector<bf16*> buf(static_cast<size_t>(P));
  std::vector<cudaStream_t> st(static_cast<size_t>(P));
  bool ok = true;
  for (int r = 0; r < P; ++r) {
    ECHO_CUDA_TRY(cudaSetDevice(devs[r]));
    ECHO_CUDA_TRY(cudaMalloc(&buf[r], n * sizeof(bf16)));
    ECHO_CUDA_TRY(cudaStreamCreateWithFlags(&st[r], cudaStreamNonBlocking));
    // on the call's stream: a plain cudaMemcpy from pageable memory may return before its DMA
    // lands, and a call on a non-blocking stream would not wait for it
    ECHO_CUDA_TRY(cudaMemcpyAsync(buf[r], x[r].data(), n * sizeof(bf16), cudaMemcpyHostToDevice, st[r]));
  }
  for (int r = 0; r < P; ++r) {  // one thread launches every rank: cuda_ipc does not mind
    ECHO_CUDA_TRY(cudaSetDevice(devs[r]));
    ok = ok && (*ars[r])(buf[r], buf[r], n, st[r]) == echo::status::success;
  }
  std::vector<bf16> out(n);
  for (int r = 0; r < P; ++r) {
    ECHO_CUDA_TRY(cudaSetDevice(devs[r]));
    ECHO_CUDA_TRY(cudaStreamSynchronize(st[r]));
    ok = ok && ars[r]->check() == echo::status::success;
  }
  ECHO_CUDA_TRY(cudaSetDevice(devs[0]));
  ECHO_CUDA_TRY(cudaMemcpy(out.data(), buf[0], n * sizeof(bf16), cudaMemcpyDeviceToHost));
  for (int r = 0; r < P; ++r) {
    cudaSetDevice(devs[r]);
    cudaFree(buf[r]);
    cudaStreamDestroy(st[r]);
  }
  ars.clear();
  return ok ? out : std::vector<bf16>{};
}
#endif

/// Relative RMS error of an output against the exact (fp64) sum of the ranks' inputs.
double rel_error(const std::vector<std::vector<bf16>>& x, const std::vector<bf16>& out) {
  const int P = static_cast<int>(x.size());
  const size_t n = x[0].size();
  double err = 0, ref = 0;
  for (size_t k = 0; k < n; ++k) {
    double exact = 0;
    for (int r = 0; r < P; ++r) exact += echo::element_traits<bf16>::to_float(x[r][k]);
    const double d = echo::element_traits<bf16>::to_float(out[k]) - exact;
    err += d * d;
    ref += exact * exact;
  }
  return std::sqrt(err / ref);
}

}  // namespace

int main(int argc, char** argv) {
  const size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1000003;
  const uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<std::vector<float>> parts(8, std::vector<float>(n));
  for (auto& p : parts)
    for (auto& v : p) v = echo::element_traits<bf16>::to_float(echo::element_traits<bf16>::from_float(nd(rng)));
  bool on_gpu = false;
#if ECHO_HAS_CUDA
  on_gpu = gpus() > 0;
#endif
  std::printf("per-call relative RMS error of one all-reduce, n = %zu, seed %llu: host reference%s\n", n,
              static_cast<unsigned long long>(seed), on_gpu ? " / GPU (ranks over the visible GPUs)" : "");
  std::printf("%3s %22s %22s %22s %22s %22s\n", "P", "zero_aware<4,128>", "zero_aware<8,128>", "naive<4,128>",
              "symmetric<4,128>", "none (bf16)");
  int differ = 0;
  for (int P : {2, 4, 8}) {
    std::vector<std::vector<bf16>> x(static_cast<size_t>(P), std::vector<bf16>(n));
    for (int r = 0; r < P; ++r)
      for (size_t k = 0; k < n; ++k) {
        float s = 0;
        for (int i = r; i < 8; i += P) s += parts[static_cast<size_t>(i)][k];
        x[static_cast<size_t>(r)][k] = echo::element_traits<bf16>::from_float(s);
      }
    std::printf("%3d", P);
    auto cell = [&](auto tag) {
      using Q = decltype(tag);
      const std::vector<bf16> h = host_call<Q>(x);
      char text[64];
      std::snprintf(text, sizeof text, "%.6f", rel_error(x, h));
#if ECHO_HAS_CUDA
      if (on_gpu) {
        const std::vector<bf16> d = device_call<Q>(x);
        const bool same = d.size() == h.size() && std::memcmp(d.data(), h.data(), h.size() * sizeof(bf16)) == 0;
        differ += !same;
        std::snprintf(text, sizeof text, "%.6f / %s", rel_error(x, h), d.empty() ? "failed" : same ? "same" : "DIFFERS");
      }
#endif
      std::printf(" %22s", text);
    };
    cell(echo::quant::zero_aware<4, 128>{});
    cell(echo::quant::zero_aware<8, 128>{});
    cell(echo::quant::naive_zero_point<4, 128>{});
    cell(echo::quant::symmetric<4, 128>{});
    cell(echo::quant::none{});
    std::printf("\n");
  }
  if (on_gpu) std::printf("GPU outputs %s the host reference's bit for bit\n", differ ? "DIFFER from" : "equal");
  return differ ? 1 : 0;
}
