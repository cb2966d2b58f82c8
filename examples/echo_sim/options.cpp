// echo-sim's flag parser.
#include "options.hpp"

#include <echo/echo.cuh>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>

namespace echo_sim {

namespace {
/// names separated by sep: the help's comma lists and the usage errors' lists.
std::string joined(const std::vector<std::string>& names, const char* sep = ",") {
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : sep) + n;
  return s;
}
}  // namespace

// The lists come from the registry, so a quantizer registered for echo-sim is in its help too.
std::string usage_text() {
  return std::string(
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
    "  --quant LIST     comma list of the quantizers echo/registry.cuh marks tool::sim:\n"
    "                   " + joined(quant_names()) + " (default zero_aware)\n"
    "  --bits LIST      code bits, comma list of 2,3,4,6,8 (default 4; ignored by quant none)\n"
    "  --group LIST     group size, comma list of 32,64,128,256 (default 128; ignored by quant none)\n"
    "  --comp LIST      comma list of " + joined(comp_names()) + "\n"
    "                   (error_feedback: fp32 state; ef_*: the device's state storages, built at 4\n"
    "                   and 8 bits of the quantizers marked tool::sim_storage: " + joined(storage_quant_names()) + ")\n"
    "                   (default none,error_feedback)\n"
    "  --collective LIST  comma list of all_reduce, reduce_scatter (sequence parallelism: the\n"
    "                   quantized reduce-scatter, then an exact all-gather of its segments, so its\n"
    "                   error alone; tokens / ranks whole groups a segment) (default all_reduce)\n"
    "  --seed S         seed of weights and tokens (default 1)\n"
    "  --passes N       forward passes over fresh tokens with the same weights; each pass is one\n"
    "                   chain (reset at its start) (default 1)\n"
    "  --warmup W       passes left out of the reported error (default passes / 2); the errors of\n"
    "                   the remaining passes are pooled: sqrt(sum ||dh||^2 / sum ||h_exact||^2)\n"
    "  --branch-gain G  scale of each block's output (default 1/sqrt(depth), the scaled init)\n"
    "  --csv            also print rows depth,collective,quant,bits,group,comp,rel_rms_error\n"
    "  --help           this text\n");
}

namespace {

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

/// s if it is one of `names`, else a usage error that lists them.
std::string one_of(const std::string& flag, const std::string& s, const std::vector<std::string>& names) {
  if (std::find(names.begin(), names.end(), s) != names.end()) return s;
  throw usage_error(flag + ": '" + s + "' is not compiled into echo-sim (" + joined(names, ", ") + ")");
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

}  // namespace

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
                                        "--branch-gain", "--collective"};
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
      o.quants = parse_list<std::string>(a, val, [&](const std::string& s) { return one_of(a, s, quant_names()); });
    } else if (a == "--collective") {
      o.collectives = parse_list<collective>(a, val, [&](const std::string& s) {
        if (s == "all_reduce") return collective::all_reduce;
        if (s == "reduce_scatter") return collective::reduce_scatter;
        throw usage_error("--collective: '" + s + "' is not all_reduce or reduce_scatter");
      });
    } else if (a == "--comp") {
      o.comps = parse_list<std::string>(a, val, [&](const std::string& s) { return one_of(a, s, comp_names()); });
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

}  // namespace echo_sim
