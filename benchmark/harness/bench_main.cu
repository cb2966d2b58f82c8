// echo_bench: Echo's all-reduce against NCCL's all-reduce, in one process, on every visible GPU
// (P ranks, one per GPU; ECHO_BENCH_GPUS=N uses the first N). With fewer than 2 GPUs it prints
// "SKIPPED: ..." and exits 0. The variants are the table in echo_bench.cu; this file is the rest.
//
// Sizes: 64 KiB .. 1 GiB of bf16 (n = bytes / 2), out of place, random normal inputs (std 1),
// different on every rank. ECHO_BENCH_SIZES restricts them (below).
//
// Measurement (timing of a batch: context.cuh): after a warm-up (5 calls) and a probe that sizes
// the batch (~2 ms of work, 1..200 calls), the reported time per call is the median of 20
// batches (10 at >= 256 MiB), fewer (at least 3) once a measurement has run 15 s counted from
// after its first call (the first call may set up NCCL connections): a slow transport (NCCL over
// sockets: ~85 ms a call at 256 MiB, ~0.35 s at 1 GiB extrapolated) stays within ~15 s per size
// and variant. Reported through state.SetIterationTime (UseManualTime, one iteration). Counters:
// time_us, algbw_GBps = bytes / t, busbw_GBps = algbw * 2(P-1)/P, speedup_vs_nccl = t_nccl / t
// at the same size, NCCL measured in this process (first, or on demand when a filter leaves it
// out), batches and calls_per_batch. A transport::nccl batch that hangs for 120 s: echo_bench
// prints what it has and exits 1.
//
// Flags: Google Benchmark's own, e.g.
//   --benchmark_filter='nccl|echo_int4/'     (a trailing '/' stops echo_int4 from matching echo_int4_ef)
//   --benchmark_filter='^nccl/|echo_nccl_'   (NCCL against the transport::nccl variants)
//   --benchmark_out=result.json --benchmark_out_format=json
// At the end a summary table (rows: size, columns: variant, cells: time_us (speedup vs NCCL)) goes
// to stdout, or to stderr when --benchmark_format=json|csv owns stdout.
//
// Environment:
//   ECHO_BENCH_GPUS=N        use the first N GPUs
//   ECHO_BENCH_SIZES=list    comma-separated sizes in bytes, optional suffix K, M, G (KiB, MiB,
//                            GiB; "KB"/"KiB" spellings too), e.g. "64K,1M,16M,256M"; even, at
//                            most 1G. Default: 64K,256K,1M,4M,16M,64M,256M,1G
//   ECHO_BENCH_WORKSPACE_MIB=N  workspace cap of every Echo object (default: the library's)
//   ECHO_BENCH_LABEL=text    a free-text label for the run (e.g. "nccl-socket"), printed in the
//                            header and the summary and stored in the JSON context
// NCCL's environment is left alone (echo_bench only prints the NCCL_* variables it finds). To
// stand in for a link between nodes, run under NCCL's socket transport over loopback:
//   NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=lo ECHO_BENCH_LABEL=nccl-socket
//   echo_bench --benchmark_filter='^nccl/|echo_nccl_'        (one command line)
// There nccl and the echo_nccl_* variants go over the socket; the cuda_ipc variants still use
// NVLink (they never go through NCCL), so compare echo_nccl_* with nccl.
#include "bench_main.cuh"
#include "sizes.hpp"

#include <benchmark/benchmark.h>
#include <nccl.h>

#include <unistd.h>  // environ

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>

namespace echo_bench {
namespace {

using bf16 = echo::bfloat16_t;

// ---- what is measured ---------------------------------------------------------------------------

constexpr size_t k_default_sizes[] = {64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB, 1 * GiB};
constexpr size_t k_max_bytes = 1 * GiB;  // the largest size ECHO_BENCH_SIZES may ask for
constexpr size_t k_max_elements = k_max_bytes / sizeof(bf16);

constexpr int k_warmup_calls = 5;
constexpr int k_probe_calls = 3;
constexpr double k_target_batch_s = 2e-3;  // a batch holds about this much work
constexpr int k_max_batch_calls = 200;
constexpr int k_reps = 20;                  // batches per measurement ...
constexpr int k_reps_large = 10;            // ... at >= k_large_bytes
constexpr size_t k_large_bytes = 256 * MiB;
constexpr double k_wall_cap_s = 15.0;       // stop adding batches once a measurement has run this long,
                                            // from after its first call (at least 3 batches are taken)
constexpr size_t k_nccl = 0;                // the baseline's index in variants()

std::vector<size_t> g_sizes(std::begin(k_default_sizes), std::end(k_default_sizes));  // ECHO_BENCH_SIZES
std::string g_label;                                                                  // ECHO_BENCH_LABEL

struct measurement {
  double t = NAN;  // median seconds per call
  int batches = 0, calls = 0;
};

/// The variants' runners (built on first use), the inputs and NCCL's times, on one context.
class bench_state {
 public:
  explicit bench_state(const std::vector<int>& devices) : ctx(devices, k_max_bytes) {}
  ~bench_state() { runners_.clear(); }  // Echo objects before the context

  bench_context ctx;

  /// The runner of variant v. A failed construction is remembered and rethrown, not retried.
  runner& get(size_t v) {
    if (auto it = runners_.find(v); it != runners_.end()) return *it->second;
    if (auto it = failed_.find(v); it != failed_.end()) throw std::runtime_error(it->second);
    try {
      return *(runners_[v] = variants()[v].make(ctx));
    } catch (const std::exception& e) {
      runners_.erase(v);
      failed_[v] = std::string("construction failed: ") + e.what();
      throw std::runtime_error(failed_[v]);
    }
  }

  /// Median seconds per call of `bytes` for this runner (see the file header).
  measurement measure(runner& run, size_t bytes) {
    const size_t n = bytes / sizeof(bf16);
    ensure_inputs(n);
    // The first call may set up NCCL connections (seconds over sockets): outside the wall cap.
    (void)ctx.time_batch(run, n, 1);
    const auto t0 = std::chrono::steady_clock::now();
    if (k_warmup_calls > 1) (void)ctx.time_batch(run, n, k_warmup_calls - 1);
    const double est = ctx.time_batch(run, n, k_probe_calls);
    const int calls = static_cast<int>(std::clamp(std::ceil(k_target_batch_s / std::max(est, 1e-9)), 1.0,
                                                  static_cast<double>(k_max_batch_calls)));
    const int reps = bytes >= k_large_bytes ? k_reps_large : k_reps;
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
      t.push_back(ctx.time_batch(run, n, calls));
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (t.size() >= 3 && wall > k_wall_cap_s) break;
    }
    std::sort(t.begin(), t.end());
    const size_t m = t.size() / 2;
    return {t.size() % 2 ? t[m] : 0.5 * (t[m - 1] + t[m]), static_cast<int>(t.size()), calls};
  }

  /// NCCL's seconds per call at `bytes`: cached, measured on demand. NaN if NCCL fails.
  double nccl_time(size_t bytes) {
    if (auto it = nccl_time_.find(bytes); it != nccl_time_.end()) return it->second;
    double t = NAN;
    try {
      t = measure(get(k_nccl), bytes).t;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "echo_bench: NCCL baseline at %s failed: %s\n", human_bytes(bytes).c_str(), e.what());
    }
    nccl_time_[bytes] = t;
    return t;
  }
  void set_nccl_time(size_t bytes, double t) { nccl_time_[bytes] = t; }

 private:
  /// Fresh N(0,1) inputs of n elements on every rank (a different stream of numbers per rank and
  /// per size); regenerated only when n changes.
  void ensure_inputs(size_t n) {
    if (inputs_n_ == n) return;
    inputs_n_ = 0;
    ctx.fill<bf16>(n, [n](int r) { return splitmix64(0xEC40BE4Cull ^ (static_cast<uint64_t>(r) << 56) ^ n); });
    inputs_n_ = n;
  }

  std::map<size_t, std::unique_ptr<runner>> runners_;
  std::map<size_t, std::string> failed_;
  std::map<size_t, double> nccl_time_;
  size_t inputs_n_ = 0;
};

// ---- results and the summary table -----------------------------------------------------------

struct cell {
  double t = NAN;        // seconds per call
  double speedup = NAN;  // t_nccl / t
  bool failed = false;
  std::string path;      // which path the call took (see runner::path)
};

std::unique_ptr<bench_state> g_bench;
std::map<size_t, std::map<size_t, cell>> g_results;  // [variant][bytes]
std::FILE* g_text = stdout;                         // where the header and the summary go

void run_variant(benchmark::State& state, size_t v) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const int P = g_bench->ctx.size();
  for (auto _ : state) {
    try {
      runner& run = g_bench->get(v);
      state.SetLabel(human_bytes(bytes) + " P=" + std::to_string(P) + " path=" + run.path(bytes));
      const measurement m = g_bench->measure(run, bytes);
      const double t = m.t;
      if (v == k_nccl) g_bench->set_nccl_time(bytes, t);
      const double t_nccl = v == k_nccl ? t : g_bench->nccl_time(bytes);
      state.SetIterationTime(t);
      const double algbw = static_cast<double>(bytes) / t / 1e9;
      state.counters["time_us"] = t * 1e6;
      state.counters["algbw_GBps"] = algbw;
      state.counters["busbw_GBps"] = algbw * 2.0 * (P - 1) / P;
      if (std::isfinite(t_nccl)) state.counters["speedup_vs_nccl"] = t_nccl / t;
      state.counters["batches"] = m.batches;
      state.counters["calls_per_batch"] = m.calls;
      g_results[v][bytes] = cell{t, t_nccl / t, false, run.path(bytes)};
    } catch (const std::exception& e) {
      g_results[v][bytes].failed = true;
      state.SkipWithError(e.what());
      break;
    }
  }
}

void print_summary(std::FILE* f) {
  if (g_results.empty()) return;
  const int P = g_bench->ctx.size();
  cudaDeviceProp prop{};
  (void)cudaGetDeviceProperties(&prop, g_bench->ctx.rank(0).device);
  std::fprintf(f, "\n== echo_bench summary%s%s%s: P=%d x %s, bf16 sum, out of place; cell = time_us (speedup vs nccl) ==\n",
               g_label.empty() ? "" : " [", g_label.c_str(), g_label.empty() ? "" : "]", P, prop.name);
  std::vector<size_t> cols;
  for (size_t v = 0; v < variants().size(); ++v)
    if (g_results.count(v)) cols.push_back(v);
  auto cell_text = [](const cell& c) {
    char buf[48];
    if (c.failed) return std::string("FAILED");
    if (!std::isfinite(c.t)) return std::string("-");
    if (std::isfinite(c.speedup)) std::snprintf(buf, sizeof buf, "%.1f (%.2fx)", c.t * 1e6, c.speedup);
    else std::snprintf(buf, sizeof buf, "%.1f", c.t * 1e6);
    return std::string(buf);
  };
  std::vector<size_t> width;
  for (size_t v : cols) {
    size_t w = std::strlen(variants()[v].name);
    for (const auto& [bytes, c] : g_results[v]) w = std::max(w, cell_text(c).size());
    width.push_back(w + 2);
  }
  std::fprintf(f, "%-8s", "size");
  for (size_t i = 0; i < cols.size(); ++i) std::fprintf(f, "%*s", static_cast<int>(width[i]), variants()[cols[i]].name);
  std::fprintf(f, "\n");
  for (size_t bytes : g_sizes) {
    bool any = false;
    for (size_t v : cols) any = any || g_results[v].count(bytes);
    if (!any) continue;
    std::fprintf(f, "%-8s", human_bytes(bytes).c_str());
    for (size_t i = 0; i < cols.size(); ++i) {
      const auto& m = g_results[cols[i]];
      const auto it = m.find(bytes);
      std::fprintf(f, "%*s", static_cast<int>(width[i]), it == m.end() ? "-" : cell_text(it->second).c_str());
    }
    std::fprintf(f, "\n");
  }
  // Where a variant's path depends on the size (echo_dispatch), say which path each size took.
  for (size_t v : cols) {
    std::string paths, first;
    bool varies = false;
    for (const auto& [bytes, c] : g_results[v]) {
      if (c.path.empty()) continue;
      if (first.empty()) first = c.path;
      varies = varies || c.path != first;
      paths += " " + human_bytes(bytes) + "=" + c.path;
    }
    if (paths.empty()) continue;
    if (varies || g_bench->get(v).size_dispatch()) std::fprintf(f, "%s paths:%s\n", variants()[v].name, paths.c_str());
  }
  std::fflush(f);
}

void fatal_hang(const std::string& what) {
  std::fprintf(stderr,
               "echo_bench: FATAL: %s. Ranks left waiting inside NCCL cannot be recovered in this process; "
               "printing the results so far and exiting (a --benchmark_out file is left incomplete).\n",
               what.c_str());
  std::fflush(stderr);
  print_summary(g_text);
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(1);  // no destructors: they would wait on the hung streams and threads
}

/// The NCCL_* variables of the environment, "NAME=value NAME=value" (read only: never set here).
std::string nccl_environment() {
  std::vector<std::string> vars;
  for (char** e = environ; e && *e; ++e)
    if (std::strncmp(*e, "NCCL_", 5) == 0) vars.emplace_back(*e);
  std::sort(vars.begin(), vars.end());
  std::string out;
  for (const std::string& v : vars) out += (out.empty() ? "" : " ") + v;
  return out;
}

std::string sizes_text() {
  std::string out;
  for (size_t b : g_sizes) out += (out.empty() ? "" : ",") + human_bytes(b);
  return out;
}

/// Does --benchmark_format (flag or BENCHMARK_FORMAT) put JSON / CSV on stdout?
bool stdout_is_machine_format(int argc, char** argv) {
  std::string fmt;
  if (const char* e = std::getenv("BENCHMARK_FORMAT")) fmt = e;
  const std::string flag = "--benchmark_format=";
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], flag.c_str(), flag.size()) == 0) fmt = argv[i] + flag.size();
  return fmt == "json" || fmt == "csv";
}

}  // namespace

/// The driver query behind all_reduce's pointer check (options::check_pointers), timed on the host.
double pointer_query_us(int device) {
  if (cudaSetDevice(device) != cudaSuccess) return -1;
  void* p = nullptr;
  if (cudaMalloc(&p, 1 << 20) != cudaSuccess) return -1;
  constexpr int calls = 2000;
  cudaPointerAttributes attr{};
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) (void)cudaPointerGetAttributes(&attr, static_cast<char*>(p) + 16 * (i % 4096));
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / calls;
  (void)cudaFree(p);
  return us;
}

echo_runner_options runner_options(bool forced) {
  echo_runner_options o;
  o.max_elements = k_max_elements;
  if (const char* w = std::getenv("ECHO_BENCH_WORKSPACE_MIB")) o.workspace_bytes = std::strtoull(w, nullptr, 10) << 20;
  o.forced = forced;
  return o;
}

}  // namespace echo_bench

int main(int argc, char** argv) {
  using namespace echo_bench;
  if (stdout_is_machine_format(argc, argv)) g_text = stderr;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

  if (const char* env = std::getenv("ECHO_BENCH_SIZES"); env && *env) {
    try {
      g_sizes = parse_sizes(env, k_max_bytes, sizeof(bf16));
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "echo_bench: ECHO_BENCH_SIZES='%s': %s (expected e.g. \"64K,1M,16M,256M\": bytes with an "
                   "optional K, M or G suffix, even, at most 1G)\n", env, ex.what());
      return 2;
    }
  }
  if (const char* env = std::getenv("ECHO_BENCH_LABEL")) g_label = env;

  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  std::string why;
  if (e != cudaSuccess) {
    why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
    count = 0;
  }
  (void)cudaGetLastError();
  int P = count;
  if (const char* env = std::getenv("ECHO_BENCH_GPUS"); env && *env) {
    char* end = nullptr;
    const long want = std::strtol(env, &end, 10);
    if (*end != '\0' || want < 1) {
      std::fprintf(stderr, "echo_bench: ECHO_BENCH_GPUS must be a positive integer, got '%s'\n", env);
      return 2;
    }
    if (want > count)
      std::fprintf(g_text, "echo_bench: ECHO_BENCH_GPUS=%ld but only %d GPU(s) visible; using %d\n", want, count, count);
    P = static_cast<int>(std::min<long>(want, count));
  }
  if (P > k_max_ranks) {
    std::fprintf(g_text, "echo_bench: %d GPUs visible; Echo's communicator takes at most %d, using the first %d\n", P,
                 k_max_ranks, k_max_ranks);
    P = k_max_ranks;
  }
  if (P < 2) {
    std::printf("SKIPPED: echo_bench needs >= 2 GPUs (found %d%s%s)\n", P, why.empty() ? "" : "; ", why.c_str());
    std::fflush(stdout);
    benchmark::Shutdown();
    return 0;
  }

  std::vector<int> devices(static_cast<size_t>(P));
  for (int r = 0; r < P; ++r) devices[static_cast<size_t>(r)] = r;
  try {
    g_bench = std::make_unique<bench_state>(devices);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "echo_bench: setup failed: %s\n", ex.what());
    return 1;
  }
  g_bench->ctx.set_hang_handler(fatal_hang);

  int nccl_version = 0;
  (void)ncclGetVersion(&nccl_version);
  const std::string nccl_env = nccl_environment();
  std::fprintf(g_text, "echo_bench%s%s%s: P=%d, NCCL %d.%d.%d, Echo %d.%d.%d, bf16 sum out of place; median of %d batches "
               "(%d at >= %s; fewer, at least 3, past %.0f s) after %d warm-up calls\n",
               g_label.empty() ? "" : " [", g_label.c_str(), g_label.empty() ? "" : "]", P, nccl_version / 10000,
               nccl_version / 100 % 100, nccl_version % 100, ECHO_VERSION_MAJOR, ECHO_VERSION_MINOR, ECHO_VERSION_PATCH,
               k_reps, k_reps_large, human_bytes(k_large_bytes).c_str(), k_wall_cap_s, k_warmup_calls);
  if (!g_label.empty()) std::fprintf(g_text, "  label: %s\n", g_label.c_str());
  std::fprintf(g_text, "  sizes: %s\n", sizes_text().c_str());
  std::fprintf(g_text, "  NCCL environment: %s\n", nccl_env.empty() ? "(no NCCL_* variable set)" : nccl_env.c_str());
  benchmark::AddCustomContext("echo_bench_label", g_label);
  benchmark::AddCustomContext("echo_bench_sizes", sizes_text());
  benchmark::AddCustomContext("echo_bench_nccl_env", nccl_env);
  // Ours, not Google Benchmark's: its "library_build_type" (and the "Library was built as DEBUG"
  // warning) describe how libbenchmark itself was compiled.
#ifdef NDEBUG
  benchmark::AddCustomContext("echo_bench_build", "release");
#else
  benchmark::AddCustomContext("echo_bench_build", "debug (no NDEBUG)");
#endif
  for (int r = 0; r < P; ++r) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, r) == cudaSuccess)
      std::fprintf(g_text, "  rank %d: device %d %s (sm_%d%d, %d SMs)\n", r, r, prop.name, prop.major, prop.minor,
                   prop.multiProcessorCount);
  }
  std::fprintf(g_text, "  pointer check: cudaPointerGetAttributes %.2f us a call (rank 0, device memory; made once "
               "for each pointer not among the last 8 a call accepted)\n", pointer_query_us(devices[0]));
  std::fflush(g_text);

  for (size_t v = 0; v < variants().size(); ++v) {
    auto* b = benchmark::RegisterBenchmark(variants()[v].name, [v](benchmark::State& st) { run_variant(st, v); });
    for (size_t bytes : g_sizes) b->Arg(static_cast<int64_t>(bytes));
    b->ArgName("bytes")->UseManualTime()->Iterations(1)->Unit(benchmark::kMicrosecond);
  }

  benchmark::RunSpecifiedBenchmarks();
  print_summary(g_text);

  g_bench.reset();
  benchmark::Shutdown();
  return 0;
}
