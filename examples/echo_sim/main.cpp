// echo-sim: the depth experiment (docs/quality.md) on Echo's host reference (model.hpp says what it
// simulates; options.cpp lists the flags). This file runs the exact and the Echo runs side by side
// and prints the error of the hidden state at depths 1, 2, 4, ..., depth.
#include "model.hpp"
#include "options.hpp"
#include "reducer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

namespace echo_sim {
namespace {

std::vector<int> checkpoints(int depth) {
  std::vector<int> c;
  for (long long k = 1; k <= depth; k *= 2) c.push_back(static_cast<int>(k));
  if (c.back() != depth) c.push_back(depth);
  return c;
}

int run(const options& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const dims d{o.ranks, o.tokens, o.width, o.ffn, o.ffn / o.ranks};
  const size_t n = static_cast<size_t>(d.T) * d.D;

  std::vector<echo_run> runs;
  for (const std::string& q : o.quants)
    for (int b : (q == "none" ? std::vector<int>{16} : o.bits))
      for (int g : (q == "none" ? std::vector<int>{1} : o.groups))
        for (const std::string& c : o.comps)
          for (const collective k : o.collectives) runs.emplace_back(d, make_reducer(request{q, b, g, c, k, o.ranks, n}));

  std::printf("echo-sim: depth experiment on the host reference (echo::reference::all_reduce over %d simulated "
              "ranks on the CPU; no GPU involved)\n",
              o.ranks);
  std::printf("model: pre-norm residual MLP, %d blocks (1 all-reduce each), width %d, ffn %d (%d per rank), "
              "tokens %d, RMSNorm (no gain, eps 1e-6), GELU tanh,\n"
              "       W1 ~ N(0, 1/width) column-parallel, W2 ~ N(0, gain^2/ffn) row-parallel, gain %.6g%s, "
              "h0 ~ N(0, 1), seed %llu\n",
              o.depth, o.width, o.ffn, d.f, o.tokens, o.branch_gain,
              std::fabs(o.branch_gain * std::sqrt(double(o.depth)) - 1.0) < 1e-12 ? " (= 1/sqrt(depth))" : "",
              static_cast<unsigned long long>(o.seed));
  std::printf("runs: exact = fp64 throughout; Echo = fp32 math, bf16 partials, bf16 all-reduce output, fp32 h\n");
  if (o.passes > 1)
    std::printf("passes: %d (fresh tokens each, same weights, one chain each); reported: passes %d..%d pooled\n",
                o.passes, o.warmup + 1, o.passes);
  std::printf("metric: relative RMS error ||h_echo - h_exact|| / ||h_exact|| after each depth (Frobenius norms over\n"
              "        the [tokens, width] state); rms(h) is the RMS of h_exact\n\n");
  std::fflush(stdout);

  const std::vector<int> cps = checkpoints(o.depth);
  // err2[run][checkpoint], norm2[checkpoint]: pooled over the reported passes
  std::vector<std::vector<double>> err2(runs.size(), std::vector<double>(cps.size(), 0.0));
  std::vector<double> norm2(cps.size(), 0.0);
  double pooled_rows = 0;  // elements behind norm2, for the RMS of h_exact

  exact_run ex(d);
  layer_weights w;
  std::vector<float> h0;
  for (int pass = 0; pass < o.passes; ++pass) {
    generate_tokens(o.seed, d, pass, h0);
    ex.start(h0);
    for (auto& r : runs) r.start(h0);
    size_t ci = 0;
    for (int layer = 1; layer <= o.depth; ++layer) {
      generate_layer(o.seed, o.branch_gain, d, layer, w);
      ex.step(w);
      for (auto& r : runs) r.step(w);
      if (ci < cps.size() && cps[ci] == layer) {
        if (pass >= o.warmup) {
          for (double v : ex.h) norm2[ci] += v * v;
          if (ci == 0) pooled_rows += static_cast<double>(n);
          for (size_t k = 0; k < runs.size(); ++k) {
            double e = 0;
            for (size_t i = 0; i < n; ++i) {
              const double dv = static_cast<double>(runs[k].h[i]) - ex.h[i];
              e += dv * dv;
            }
            err2[k][ci] += e;
          }
        }
        ++ci;
      }
    }
  }
  for (size_t k = 0; k < runs.size(); ++k)
    for (size_t i = 0; i < n; ++i)
      if (!std::isfinite(runs[k].h[i]))
        throw std::runtime_error("echo-sim: " + runs[k].red->label() + " produced a non-finite hidden state");

  auto rel = [&](size_t k, size_t c) { return std::sqrt(err2[k][c] / norm2[c]); };
  // Table: one row per checkpoint, one column per run.
  std::vector<size_t> wcol;
  std::printf("%6s  %10s", "depth", "rms(h)");
  for (auto& r : runs) {
    wcol.push_back(std::max<size_t>(12, r.red->label().size()));
    std::printf("  %*s", static_cast<int>(wcol.back()), r.red->label().c_str());
  }
  std::printf("\n");
  for (size_t c = 0; c < cps.size(); ++c) {
    std::printf("%6d  %10.4f", cps[c], std::sqrt(norm2[c] / pooled_rows));
    for (size_t k = 0; k < runs.size(); ++k) std::printf("  %*.6f", static_cast<int>(wcol[k]), rel(k, c));
    std::printf("\n");
  }
  std::printf("%6s  %10s", "ratio", "");  // growth: last checkpoint over depth 8 (or the first)
  const size_t base = std::min<size_t>(3, cps.size() - 1);
  for (size_t k = 0; k < runs.size(); ++k)
    std::printf("  %*.3f", static_cast<int>(wcol[k]), rel(k, cps.size() - 1) / rel(k, base));
  std::printf("   <- error at depth %d / error at depth %d\n", cps.back(), cps[base]);

  if (o.csv) {
    std::printf("\ndepth,collective,quant,bits,group,comp,rel_rms_error\n");
    for (size_t c = 0; c < cps.size(); ++c)
      for (size_t k = 0; k < runs.size(); ++k) {
        const reducer& r = *runs[k].red;
        std::printf("%d,%s,%s,%d,%d,%s,%.9g\n", cps[c], r.coll == collective::reduce_scatter ? "reduce_scatter" : "all_reduce",
                    r.quant.c_str(), r.bits, r.group, r.comp.c_str(), rel(k, c));
      }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("\ntime: %.2f s\n", secs);
  return 0;
}

}  // namespace
}  // namespace echo_sim

int main(int argc, char** argv) {
  bool help = false;
  echo_sim::options o;
  try {
    o = echo_sim::parse(argc, argv, help);
  } catch (const echo_sim::usage_error& e) {
    std::fprintf(stderr, "echo-sim: %s\n(run echo-sim --help for the flags)\n", e.what());
    return 2;
  }
  if (help) {
    std::fputs(echo_sim::usage_text().c_str(), stdout);
    return 0;
  }
  try {
    return echo_sim::run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
