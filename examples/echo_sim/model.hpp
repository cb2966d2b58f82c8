// echo-sim's model: the depth experiment (docs/quality.md) on Echo's host reference (no GPU).
//
// A pre-norm residual stream h [tokens, width] goes through `depth` tensor-parallel MLP blocks
// over P simulated ranks, Megatron style:
//
//   u      = RMSNorm(h)                       (no learned gain, eps 1e-6)
//   a_r    = u W1_r                           (W1 column-parallel: rank r holds ffn/P columns)
//   p_r    = GELU_tanh(a_r) W2_r              (W2 row-parallel: rank r holds the same ffn/P rows)
//   h     += all_reduce(p_0, ..., p_{P-1})    (one all-reduce site per block)
//
// From the same seed and weights it runs
//   - an "exact" run: every operation in fp64, the partials summed exactly in fp64;
//   - one Echo run per requested quantizer x bits x group x compensator: the partials are
//     computed in fp32 from that run's own h (so every error goes through the nonlinearity),
//     rounded to bf16 (the all-reduce dtype of a bf16 model) and reduced by
//     echo::reference::all_reduce<Q, C> with one chain_state per pass (reset at the start of it);
//     h (fp32) += the bf16 output.
// and reports, per depth checkpoint, the relative RMS error ||h_echo - h_exact|| / ||h_exact||.
//
// Weights: W1 ~ N(0, 1/width) and W2 ~ N(0, gain^2 / ffn) with gain = 1/sqrt(depth) by default:
// fan-in ("LeCun") init with the output projection scaled down by the number of residual
// branches (GPT-2 / Megatron's scaled init, std / sqrt(2 * layers) with two sites per layer).
// Tokens: h_0 ~ N(0, 1). All random numbers come from xoshiro256** and a ziggurat normal sampler,
// keyed by (seed, layer) and (seed, pass), so every run sees the same weights and tokens.
#pragma once

#include "reducer.hpp"
#include "rng.hpp"

#include <echo/echo.cuh>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace echo_sim {

struct dims {
  int P, T, D, F, f;  // ranks, tokens, width, ffn, ffn per rank
};

/// One block's weights, fp32 values shared by every run (the exact run widens them to fp64).
struct layer_weights {
  std::vector<float> w1;  // [D][F], row-major: rank r's columns are [r f, (r+1) f)
  std::vector<float> w2;  // [F][D], row-major: rank r's rows are [r f, (r+1) f)
};

/// Block `layer`'s weights: W1 ~ N(0, 1/D), W2 ~ N(0, branch_gain^2/F), keyed by (seed, layer).
inline void generate_layer(uint64_t seed, double branch_gain, const dims& d, int layer, layer_weights& w) {
  normal_rng rng(seed, /*stream=*/1, static_cast<uint64_t>(layer));
  w.w1.resize(static_cast<size_t>(d.D) * d.F);
  w.w2.resize(static_cast<size_t>(d.F) * d.D);
  const double s1 = 1.0 / std::sqrt(static_cast<double>(d.D));
  const double s2 = branch_gain / std::sqrt(static_cast<double>(d.F));
  rng.fill(w.w1.data(), w.w1.size(), s1);
  rng.fill(w.w2.data(), w.w2.size(), s2);
}

/// Pass `pass`'s tokens: h0 ~ N(0, 1), keyed by (seed, pass).
inline void generate_tokens(uint64_t seed, const dims& d, int pass, std::vector<float>& h0) {
  normal_rng rng(seed, /*stream=*/2, static_cast<uint64_t>(pass));
  h0.resize(static_cast<size_t>(d.T) * d.D);
  rng.fill(h0.data(), h0.size(), 1.0);
}

template <class R>
R gelu_tanh(R x) {
  const R k0 = static_cast<R>(0.7978845608028654);  // sqrt(2 / pi)
  const R k1 = static_cast<R>(0.044715);
  return static_cast<R>(0.5) * x * (static_cast<R>(1) + std::tanh(k0 * (x + k1 * x * x * x)));
}

/// u = h / sqrt(mean(h^2) + eps), per row, in precision R.
template <class R>
void rms_norm(const R* h, R* u, int T, int D) {
  const R eps = static_cast<R>(1e-6);
  for (int t = 0; t < T; ++t) {
    const R* row = h + static_cast<size_t>(t) * D;
    R ss = 0;
    for (int i = 0; i < D; ++i) ss += row[i] * row[i];
    const R inv = static_cast<R>(1) / std::sqrt(ss / static_cast<R>(D) + eps);
    R* out = u + static_cast<size_t>(t) * D;
    for (int i = 0; i < D; ++i) out[i] = row[i] * inv;
  }
}

/// y[0, len) += c0 x0 + c1 x1 + c2 x2 + c3 x3 (four rows of a GEMM at once: a quarter of the
/// loads and stores of y that a row at a time would need).
template <class R>
inline void axpy4(R* __restrict y, const float* __restrict x0, const float* __restrict x1,
                  const float* __restrict x2, const float* __restrict x3, R c0, R c1, R c2, R c3, int len) {
  for (int j = 0; j < len; ++j)
    y[j] += (c0 * static_cast<R>(x0[j]) + c1 * static_cast<R>(x1[j])) +
            (c2 * static_cast<R>(x2[j]) + c3 * static_cast<R>(x3[j]));
}
template <class R>
inline void axpy1(R* __restrict y, const float* __restrict x, R c, int len) {
  for (int j = 0; j < len; ++j) y[j] += c * static_cast<R>(x[j]);
}

/// Rank r's partial p = GELU(u W1_r) W2_r, in precision R (the fp32 weights widened to R).
/// a: scratch [T][f]; p: output [T][D]. Plain GEMM loops, accumulating in R.
template <class R>
void partial(const dims& d, const layer_weights& w, int r, const R* __restrict u, R* __restrict a,
             R* __restrict p) {
  const int T = d.T, D = d.D, F = d.F, f = d.f;
  std::fill(a, a + static_cast<size_t>(T) * f, R(0));
  const float* w1 = w.w1.data() + static_cast<size_t>(r) * f;  // column block of rank r
  int i = 0;
  for (; i + 4 <= D; i += 4) {  // a[t][:] += sum_i u[t][i] W1[i][cols of r]
    const float* r0 = w1 + static_cast<size_t>(i) * F;
    for (int t = 0; t < T; ++t) {
      const R* ut = u + static_cast<size_t>(t) * D + i;
      axpy4(a + static_cast<size_t>(t) * f, r0, r0 + F, r0 + 2 * size_t(F), r0 + 3 * size_t(F), ut[0], ut[1], ut[2],
            ut[3], f);
    }
  }
  for (; i < D; ++i)
    for (int t = 0; t < T; ++t)
      axpy1(a + static_cast<size_t>(t) * f, w1 + static_cast<size_t>(i) * F, u[static_cast<size_t>(t) * D + i], f);
  for (size_t k = 0, e = static_cast<size_t>(T) * f; k < e; ++k) a[k] = gelu_tanh(a[k]);

  std::fill(p, p + static_cast<size_t>(T) * D, R(0));
  const float* w2 = w.w2.data() + static_cast<size_t>(r) * f * D;  // row block of rank r
  int j = 0;
  for (; j + 4 <= f; j += 4) {  // p[t][:] += sum_j g[t][j] W2[rows of r][:]
    const float* r0 = w2 + static_cast<size_t>(j) * D;
    for (int t = 0; t < T; ++t) {
      const R* gt = a + static_cast<size_t>(t) * f + j;
      axpy4(p + static_cast<size_t>(t) * D, r0, r0 + D, r0 + 2 * size_t(D), r0 + 3 * size_t(D), gt[0], gt[1], gt[2],
            gt[3], D);
    }
  }
  for (; j < f; ++j)
    for (int t = 0; t < T; ++t)
      axpy1(p + static_cast<size_t>(t) * D, w2 + static_cast<size_t>(j) * D, a[static_cast<size_t>(t) * f + j], D);
}

/// The fp64 run: partials in fp64, summed exactly (in fp64, rank order) into h.
struct exact_run {
  dims d;
  std::vector<double> h, u, a, p, sum;
  explicit exact_run(const dims& dd)
      : d(dd), h(size_t(d.T) * d.D), u(h.size()), a(size_t(d.T) * d.f), p(h.size()), sum(h.size()) {}
  void start(const std::vector<float>& h0) { std::copy(h0.begin(), h0.end(), h.begin()); }
  void step(const layer_weights& w) {
    rms_norm(h.data(), u.data(), d.T, d.D);
    std::fill(sum.begin(), sum.end(), 0.0);
    for (int r = 0; r < d.P; ++r) {
      partial(d, w, r, u.data(), a.data(), p.data());
      for (size_t k = 0; k < sum.size(); ++k) sum[k] += p[k];
    }
    for (size_t k = 0; k < h.size(); ++k) h[k] += sum[k];
  }
};

/// One Echo run: fp32 partials from its own h, rounded to bf16, reduced by the reference.
struct echo_run {
  dims d;
  std::unique_ptr<reducer> red;
  std::vector<float> h, u, a, p;
  std::vector<std::vector<bf16>> in, out;
  std::vector<const bf16*> in_ptr;
  std::vector<bf16*> out_ptr;
  echo_run(const dims& dd, std::unique_ptr<reducer> r)
      : d(dd), red(std::move(r)), h(size_t(d.T) * d.D), u(h.size()), a(size_t(d.T) * d.f), p(h.size()),
        in(d.P, std::vector<bf16>(h.size())), out(d.P, std::vector<bf16>(h.size())) {
    for (int k = 0; k < d.P; ++k) {
      in_ptr.push_back(in[k].data());
      out_ptr.push_back(out[k].data());
    }
  }
  void start(const std::vector<float>& h0) {
    h = h0;
    red->begin_pass();
  }
  void step(const layer_weights& w) {
    rms_norm(h.data(), u.data(), d.T, d.D);
    for (int r = 0; r < d.P; ++r) {
      partial(d, w, r, u.data(), a.data(), p.data());
      for (size_t k = 0; k < p.size(); ++k) in[r][k] = echo::element_traits<bf16>::from_float(p[k]);
    }
    red->reduce(in_ptr, out_ptr, h.size());
    for (int r = 1; r < d.P; ++r)  // the algorithm promises bit-identical outputs on all ranks
      if (std::memcmp(out[r].data(), out[0].data(), out[0].size() * sizeof(bf16)) != 0)
        throw std::runtime_error("echo-sim: " + red->label() + ": rank " + std::to_string(r) +
                                 " got a different all-reduce output than rank 0");
    for (size_t k = 0; k < h.size(); ++k) h[k] += echo::element_traits<bf16>::to_float(out[0][k]);
  }
};

}  // namespace echo_sim
