// echo-sim: the depth experiment of issue 2, on Echo's host reference (no GPU involved).
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
#include "echo_sim_reducer.hpp"

#include <echo/echo.cuh>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// ------------------------------------------------------------------------------------------
// Random numbers: xoshiro256** seeded through splitmix64, and a 128-box ziggurat for N(0, 1).
// ------------------------------------------------------------------------------------------

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

class normal_rng {
 public:
  /// A stream keyed by (seed, stream, index): independent streams for weights and tokens.
  normal_rng(uint64_t seed, uint64_t stream, uint64_t index) {
    uint64_t x = seed;
    x ^= splitmix64(x) + stream * 0xD1B54A32D192ED03ull;
    x ^= splitmix64(x) + index * 0x8CB92BA72F3D8DD7ull;
    for (auto& w : s_) w = splitmix64(x);
  }

  uint64_t next() { return step(s_); }
  double uniform() { return to_unit(next()); }  // [0, 1)

  /// x[k] = scale * (an N(0, 1) sample), rounded to fp32.
  void fill(float* x, size_t n, double scale) {
    const tables& T = tab();
    uint64_t st[4] = {s_[0], s_[1], s_[2], s_[3]};  // a local copy stays in registers
    for (size_t k = 0; k < n; ++k) x[k] = static_cast<float>(scale * normal(T, st));
    std::memcpy(s_, st, sizeof st);
  }
  double normal() { return normal(tab(), s_); }

 private:
  struct tables;
  /// xoshiro256** (Blackman & Vigna).
  __attribute__((always_inline)) static uint64_t step(uint64_t* s) {
    const uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
  }
  static double to_unit(uint64_t u) { return static_cast<double>(u >> 11) * 0x1.0p-53; }

  /// Marsaglia & Tsang's ziggurat with 128 boxes; box index, sign and uniform use disjoint bits.
  __attribute__((always_inline)) static double normal(const tables& T, uint64_t* s) {
    for (;;) {
      const uint64_t u = step(s);
      const int i = static_cast<int>(u & 127u);
      const uint64_t sign = (u << 56) & 0x8000000000000000ull;  // bit 7 (a random sign, no branch)
      const double z = to_unit(u) * T.x[i];
      if (__builtin_expect(z < T.x[i + 1], 1)) return with_sign(z, sign);  // the box's core (~99%)
      if (i == 0) {  // the base strip beyond r: Marsaglia's tail method
        double a, b;
        do {
          a = -std::log1p(-to_unit(step(s))) / T.r;
          b = -std::log1p(-to_unit(step(s)));
        } while (b + b < a * a);
        return with_sign(T.r + a, sign);
      }
      if (T.f[i] + to_unit(step(s)) * (T.f[i + 1] - T.f[i]) < std::exp(-0.5 * z * z)) return with_sign(z, sign);
    }
  }

  struct tables {
    static constexpr double r = 3.442619855899;       // start of the tail for 128 boxes
    static constexpr double v = 9.91256303526217e-3;  // area of each box
    double x[129];  // x[0] = v / f(r) (base strip width), x[1] = r > x[2] > ... > x[128] = 0
    double f[129];  // f(x[i]) = exp(-x[i]^2 / 2)
    tables() {
      const auto fn = [](double t) { return std::exp(-0.5 * t * t); };
      x[0] = v / fn(r);
      x[1] = r;
      for (int i = 1; i < 127; ++i) x[i + 1] = std::sqrt(-2.0 * std::log(v / x[i] + fn(x[i])));
      x[128] = 0.0;
      for (int i = 0; i <= 128; ++i) f[i] = fn(x[i]);
      f[0] = fn(r);  // unused: box 0 never takes the wedge path
    }
  };
  static const tables& tab() {
    static const tables t;
    return t;
  }
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static double with_sign(double x, uint64_t sign) {  // x >= 0
    uint64_t b;
    std::memcpy(&b, &x, sizeof b);
    b |= sign;
    std::memcpy(&x, &b, sizeof b);
    return x;
  }
  uint64_t s_[4];
};

// ------------------------------------------------------------------------------------------
// Options.
// ------------------------------------------------------------------------------------------

using echo_sim::bf16;
using echo_sim::comp_kind;
using echo_sim::quant_kind;
using echo_sim::reducer;

struct options {
  int ranks = 4;
  int depth = 512;
  int width = 512;
  int tokens = 16;
  int ffn = 0;  // 0: 4 * width
  std::vector<quant_kind> quants{quant_kind::zero_aware};
  std::vector<int> bits{4};
  std::vector<int> groups{128};
  std::vector<comp_kind> comps{comp_kind::none, comp_kind::error_feedback};
  uint64_t seed = 1;
  int passes = 1;
  int warmup = -1;          // -1: passes / 2
  double branch_gain = 0;   // 0: 1 / sqrt(depth)
  bool csv = false;
};

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

const char* const usage_text =
    "usage: echo-sim [flags]\n"
    "\n"
    "The depth experiment: a pre-norm tensor-parallel MLP stack with random weights, run in fp64\n"
    "(exact) and through echo::reference::all_reduce (bf16 partials) for every requested\n"
    "quantizer x bits x group x compensator; prints the relative RMS error of the hidden state\n"
    "||h - h_exact|| / ||h_exact|| at depths 1, 2, 4, ..., depth. Host only: no GPU involved.\n"
    "\n"
    "  --ranks P        simulated tensor-parallel ranks (default 4)\n"
    "  --depth K        all-reduce sites, one per block (default 512)\n"
    "  --width D        hidden size (default 512)\n"
    "  --tokens T       rows of the residual stream (default 16)\n"
    "  --ffn F          MLP hidden size, a multiple of P (default 4 * width)\n"
    "  --quant LIST     comma list of zero_aware,naive_zero_point,symmetric,none (default zero_aware)\n"
    "  --bits LIST      code bits, comma list of 2,3,4,6,8 (default 4; ignored by quant none)\n"
    "  --group LIST     group size, comma list of 32,64,128,256 (default 128; ignored by quant none)\n"
    "  --comp LIST      comma list of none,error_feedback (default none,error_feedback)\n"
    "  --seed S         seed of weights and tokens (default 1)\n"
    "  --passes N       forward passes over fresh tokens with the same weights; each pass is one\n"
    "                   chain (reset at its start) (default 1)\n"
    "  --warmup W       passes left out of the reported error (default passes / 2); the errors of\n"
    "                   the remaining passes are pooled: sqrt(sum ||dh||^2 / sum ||h_exact||^2)\n"
    "  --branch-gain G  scale of each block's output (default 1/sqrt(depth), the scaled init)\n"
    "  --csv            also print rows depth,quant,bits,group,comp,rel_rms_error\n"
    "  --help           this text\n";

template <class T, class F>
std::vector<T> parse_list(const std::string& flag, const std::string& v, F&& one) {
  std::vector<T> out;
  std::stringstream ss(v);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) throw usage_error(flag + ": empty item in list '" + v + "'");
    const T t = one(item);
    if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
  }
  if (out.empty()) throw usage_error(flag + ": empty list");
  return out;
}

long long parse_int(const std::string& flag, const std::string& v, long long lo, long long hi) {
  char* end = nullptr;
  errno = 0;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno == ERANGE)
    throw usage_error(flag + ": '" + v + "' is not an integer");
  if (x < lo || x > hi)
    throw usage_error(flag + ": " + v + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}

options parse(int argc, char** argv, bool& help) {
  options o;
  help = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i], val;
    bool has_val = false;
    if (a == "--help" || a == "-h") {
      help = true;
      return o;
    }
    if (a == "--csv") {
      o.csv = true;
      continue;
    }
    if (a.rfind("--", 0) != 0) throw usage_error("unexpected argument '" + a + "'");
    const size_t eq = a.find('=');
    if (eq != std::string::npos) {
      val = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_val = true;
    }
    static const char* const known[] = {"--ranks", "--depth", "--width", "--tokens", "--ffn",    "--quant",
                                        "--bits",  "--group", "--comp",  "--seed",   "--passes", "--warmup",
                                        "--branch-gain"};
    if (std::find_if(std::begin(known), std::end(known), [&](const char* k) { return a == k; }) == std::end(known))
      throw usage_error("unknown flag '" + a + "'");
    if (!has_val) {
      if (i + 1 >= argc) throw usage_error(a + " needs a value");
      val = argv[++i];
    }
    if (a == "--ranks") o.ranks = static_cast<int>(parse_int(a, val, 1, 1024));
    else if (a == "--depth") o.depth = static_cast<int>(parse_int(a, val, 1, 1 << 20));
    else if (a == "--width") o.width = static_cast<int>(parse_int(a, val, 1, 1 << 16));
    else if (a == "--tokens") o.tokens = static_cast<int>(parse_int(a, val, 1, 1 << 16));
    else if (a == "--ffn") o.ffn = static_cast<int>(parse_int(a, val, 1, 1 << 20));
    else if (a == "--seed") o.seed = static_cast<uint64_t>(parse_int(a, val, 0, (1ll << 62)));
    else if (a == "--passes") o.passes = static_cast<int>(parse_int(a, val, 1, 1 << 20));
    else if (a == "--warmup") o.warmup = static_cast<int>(parse_int(a, val, 0, 1 << 20));
    else if (a == "--branch-gain") {
      char* end = nullptr;
      o.branch_gain = std::strtod(val.c_str(), &end);
      if (val.empty() || *end != '\0' || !(o.branch_gain > 0) || !std::isfinite(o.branch_gain))
        throw usage_error("--branch-gain: '" + val + "' is not a positive number");
    } else if (a == "--quant") {
      o.quants = parse_list<quant_kind>(a, val, [&](const std::string& s) {
        if (s == "zero_aware") return quant_kind::zero_aware;
        if (s == "naive_zero_point") return quant_kind::naive_zero_point;
        if (s == "symmetric") return quant_kind::symmetric;
        if (s == "none") return quant_kind::none;
        throw usage_error("--quant: unknown quantizer '" + s + "' (zero_aware, naive_zero_point, symmetric, none)");
      });
    } else if (a == "--comp") {
      o.comps = parse_list<comp_kind>(a, val, [&](const std::string& s) {
        if (s == "none") return comp_kind::none;
        if (s == "error_feedback") return comp_kind::error_feedback;
        throw usage_error("--comp: unknown compensator '" + s + "' (none, error_feedback)");
      });
    } else if (a == "--bits") {
      o.bits = parse_list<int>(a, val, [&](const std::string& s) {
        const int b = static_cast<int>(parse_int(a, s, 0, 64));
        if (!echo::quant::detail::supported_bits(b)) throw usage_error("--bits: " + s + " is not one of 2, 3, 4, 6, 8");
        return b;
      });
    } else if (a == "--group") {
      o.groups = parse_list<int>(a, val, [&](const std::string& s) {
        const int g = static_cast<int>(parse_int(a, s, 0, 1 << 20));
        if (!echo::quant::detail::supported_group(g))
          throw usage_error("--group: " + s + " is not one of 32, 64, 128, 256");
        return g;
      });
    }
  }
  if (o.ffn == 0) o.ffn = 4 * o.width;
  if (o.ffn % o.ranks != 0)
    throw usage_error("--ffn " + std::to_string(o.ffn) + " is not a multiple of --ranks " + std::to_string(o.ranks) +
                      " (W1 / W2 are split into ffn/P columns / rows per rank)");
  if (o.warmup < 0) o.warmup = o.passes / 2;
  if (o.warmup >= o.passes)
    throw usage_error("--warmup " + std::to_string(o.warmup) + " leaves none of the " + std::to_string(o.passes) +
                      " passes to report");
  if (static_cast<long long>(o.tokens) * o.width > (1ll << 28)) throw usage_error("--tokens * --width is too large");
  if (o.branch_gain == 0) o.branch_gain = 1.0 / std::sqrt(static_cast<double>(o.depth));
  return o;
}

// ------------------------------------------------------------------------------------------
// The model.
// ------------------------------------------------------------------------------------------

struct dims {
  int P, T, D, F, f;  // ranks, tokens, width, ffn, ffn per rank
};

/// One block's weights, fp32 values shared by every run (the exact run widens them to fp64).
struct layer_weights {
  std::vector<float> w1;  // [D][F], row-major: rank r's columns are [r f, (r+1) f)
  std::vector<float> w2;  // [F][D], row-major: rank r's rows are [r f, (r+1) f)
};

void generate_layer(const options& o, const dims& d, int layer, layer_weights& w) {
  normal_rng rng(o.seed, /*stream=*/1, static_cast<uint64_t>(layer));
  w.w1.resize(static_cast<size_t>(d.D) * d.F);
  w.w2.resize(static_cast<size_t>(d.F) * d.D);
  const double s1 = 1.0 / std::sqrt(static_cast<double>(d.D));
  const double s2 = o.branch_gain / std::sqrt(static_cast<double>(d.F));
  rng.fill(w.w1.data(), w.w1.size(), s1);
  rng.fill(w.w2.data(), w.w2.size(), s2);
}

void generate_tokens(const options& o, const dims& d, int pass, std::vector<float>& h0) {
  normal_rng rng(o.seed, /*stream=*/2, static_cast<uint64_t>(pass));
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
  for (quant_kind q : o.quants)
    for (int b : (q == quant_kind::none ? std::vector<int>{16} : o.bits))
      for (int g : (q == quant_kind::none ? std::vector<int>{1} : o.groups))
        for (comp_kind c : o.comps)
          runs.emplace_back(d, echo_sim::make_reducer(q, b, g, c, echo_sim::make_args{o.ranks, n}));

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
    generate_tokens(o, d, pass, h0);
    ex.start(h0);
    for (auto& r : runs) r.start(h0);
    size_t ci = 0;
    for (int layer = 1; layer <= o.depth; ++layer) {
      generate_layer(o, d, layer, w);
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
    std::printf("\ndepth,quant,bits,group,comp,rel_rms_error\n");
    for (size_t c = 0; c < cps.size(); ++c)
      for (size_t k = 0; k < runs.size(); ++k) {
        const reducer& r = *runs[k].red;
        std::printf("%d,%s,%d,%d,%s,%.9g\n", cps[c], r.quant.c_str(), r.bits, r.group, r.comp.c_str(), rel(k, c));
      }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("\ntime: %.2f s\n", secs);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool help = false;
  options o;
  try {
    o = parse(argc, argv, help);
  } catch (const usage_error& e) {
    std::fprintf(stderr, "echo-sim: %s\n(run echo-sim --help for the flags)\n", e.what());
    return 2;
  }
  if (help) {
    std::fputs(usage_text, stdout);
    return 0;
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
