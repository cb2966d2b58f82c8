// per-call-error: the error one Echo call adds, at P = 2, 4 and 8, on the host reference (which
// the GPU path matches bit for bit). Each value is quantized at most twice whatever P is, so the
// per-call error should not grow with P.
//
// For each P the same global data is reduced: 8 partials of n values ~ N(0, 1) in bf16; with
// P < 8 ranks, rank r holds the exact fp32 sum of partials r, r+P, ... rounded once to bf16 (so
// every P reduces nearly the same numbers). Printed: relative RMS error of the output against the
// exact (fp64) sum of what the ranks hold, per quantizer.
//   per-call-error [n] [seed]
#include <echo/echo.cuh>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace {

using bf16 = echo::bfloat16_t;

template <class Q>
double rel_error(const std::vector<std::vector<bf16>>& x) {
  const int P = static_cast<int>(x.size());
  const size_t n = x[0].size();
  std::vector<std::vector<bf16>> out(x.size(), std::vector<bf16>(n));
  std::vector<const bf16*> in;
  std::vector<bf16*> o;
  for (int r = 0; r < P; ++r) in.push_back(x[r].data()), o.push_back(out[r].data());
  const echo::reference::all_reduce<Q> ar(P);
  ar(in, o, n);
  double err = 0, ref = 0;
  for (size_t k = 0; k < n; ++k) {
    double exact = 0;
    for (int r = 0; r < P; ++r) exact += echo::element_traits<bf16>::to_float(x[r][k]);
    const double d = echo::element_traits<bf16>::to_float(out[0][k]) - exact;
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
  std::printf("per-call relative RMS error of one all-reduce (host reference, bit-identical to the GPU path), n = %zu, seed %llu\n",
              n, static_cast<unsigned long long>(seed));
  std::printf("%3s %16s %16s %16s %16s %16s\n", "P", "zero_aware<4,128>", "zero_aware<8,128>", "naive<4,128>",
              "symmetric<4,128>", "none (bf16)");
  for (int P : {2, 4, 8}) {
    std::vector<std::vector<bf16>> x(static_cast<size_t>(P), std::vector<bf16>(n));
    for (int r = 0; r < P; ++r)
      for (size_t k = 0; k < n; ++k) {
        float s = 0;
        for (int i = r; i < 8; i += P) s += parts[static_cast<size_t>(i)][k];
        x[static_cast<size_t>(r)][k] = echo::element_traits<bf16>::from_float(s);
      }
    std::printf("%3d %16.6f %16.6f %16.6f %16.6f %16.6f\n", P, rel_error<echo::quant::zero_aware<4, 128>>(x),
                rel_error<echo::quant::zero_aware<8, 128>>(x), rel_error<echo::quant::naive_zero_point<4, 128>>(x),
                rel_error<echo::quant::symmetric<4, 128>>(x), rel_error<echo::quant::none>(x));
  }
}
