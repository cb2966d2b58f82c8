// echo-perf: Echo's all-reduce measured and printed the way NCCL's all_reduce_perf
// (nccl-tests) does it, with NCCL's own all-reduce at the same sizes in the same run, so a reader
// from NCCL's world can compare the two at a glance. One process drives -g GPUs (one rank each).
//
//   echo-perf -b 8 -e 1G -f 2 -g 2 [-n 20 -w 5] [-d bf16] [-q zero_aware -B 4 -G 128]
//             [-c none|error_feedback] [-t cuda_ipc|nccl] [-N 1] [-D 0] [-S 0] [-P 0]
//
// Columns, for out-of-place and in-place calls: time (us, per call: CUDA events around -n calls
// on every rank's stream, the slowest rank), algbw = size / time, busbw = algbw * 2(P-1)/P (GB/s),
// and, since Echo is lossy, where nccl-tests prints #wrong: maxerr = max|out - exact| / max|exact|
// and rmserr = ||out - exact|| / ||exact||, of one call on a fresh chain against the exact fp64 sum
// of the inputs (computed on each GPU; the worst rank). Error feedback does not show in one call's
// error: it cancels errors across the calls of a chain (examples/echo-sim measures that). The NCCL
// rows are ncclAllReduce on the same type and buffers; "vs nccl" is NCCL's out-of-place time over
// Echo's. Inputs: N(0, 1), a different stream on every rank and size. In place, the buffer is
// refilled before the timed calls and its values grow about P-fold per call (fp16 may overflow;
// that changes no timing). Exit codes: 0, 1 (a failure), 2 (bad flags), 77 (fewer than 2 GPUs; with
// -S 1, no GPU).
//
// For ncu (-S 1 -P 1): every rank's fused kernel spins on its peers' flags, so ncu's kernel replay,
// which runs one kernel at a time, would leave each rank waiting for the other. With -P 1 one call
// of every rank is captured into one CUDA graph and launched once between cudaProfilerStart and
// cudaProfilerStop; `ncu --graph-profiling graph --profile-from-start off` then measures the graph
// as one workload, its kernels running together. -S 1 lets -g ranks share GPUs (rank r on GPU
// r % GPUs), so one GPU holds a P = 2 call: right for counting instructions and bytes, not for link
// speed (its "peer" stores never leave the GPU). tools/pipeline-profile.sh runs both.
#include "harness/context.cuh"
#include "harness/nccl_runner.cuh"
#include "harness/sizes.hpp"
#include "perf/error.cuh"
#include "perf/instances.cuh"

#include <cuda_profiler_api.h>
#include <unistd.h>  // getopt

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace echo_perf {
namespace {

using echo_bench::parse_size;

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct options {
  size_t min_bytes = 32 * echo_bench::MiB, max_bytes = 32 * echo_bench::MiB, step_bytes = echo_bench::MiB;
  long step_factor = 1;
  int gpus = 0;  // 0: every visible GPU (at most 8)
  int iters = 20, warmup = 5;
  bool with_nccl = true, dispatch = false;
  bool share = false;    // -S: -g ranks over fewer GPUs
  bool profile = false;  // -P: one graph-captured call of every rank in a profiler range, per size
  std::optional<size_t> wide_from, mid_from;  // -W, -M: the pipeline's tiers by size (unset: the dispatch table's)
  config cfg;
};

const char* const usage_text =
    "usage: echo-perf [flags]   (nccl-tests' all_reduce_perf, for Echo; NCCL in the same run)\n"
    "  -b, -e BYTES   smallest and largest size (K, M, G suffixes: binary), default 32M\n"
    "  -f FACTOR      multiply the size by FACTOR from -b to -e (default 1: add -i)\n"
    "  -i BYTES       add this to the size when -f is 1 (default 1M)\n"
    "  -g GPUS        ranks, one GPU each, one process (default: every visible GPU, at most 8)\n"
    "  -n ITERS       timed calls per size (default 20)\n"
    "  -w ITERS       warm-up calls per size (default 5)\n"
    "  -d TYPE        bf16 | fp16 | fp32 (also bfloat16, half, float; default bf16)\n"
    "  -q QUANT       a quantizer compiled in (echo/registry.cuh, tool::perf / perf_bf16; the list:\n"
    "                 -q ?), default zero_aware; rotated: Hadamard-rotated zero_aware; default:\n"
    "                 echo::default_quantizer\n"
    "  -B BITS        bits (default 4)      -G GROUP   group size (default 128)\n"
    "  -c COMP        none | error_feedback (step8 state, int8 for a clipped quantizer; default none)\n"
    "  -t TRANSPORT   cuda_ipc | nccl (default cuda_ipc)\n"
    "  -N 0|1         also run NCCL's all-reduce at every size (default 1)\n"
    "  -D 0|1         1: echo::tuning::dispatch_table picks the path by size (what a user gets);\n"
    "                 0: the quantizer at every size (default)\n"
    "  -S 0|1         1: -g ranks may share GPUs (rank r on GPU r % GPUs; no NCCL rows where they\n"
    "                 do): for correctness and ncu on fewer GPUs, not for link speed (default 0)\n"
    "  -P 0|1         1: after timing each size, one call of every rank captured in one CUDA graph\n"
    "                 and launched between cudaProfilerStart/Stop, for\n"
    "                 ncu --graph-profiling graph --profile-from-start off (default 0)\n"
    "  -W, -M BYTES   cuda_ipc: the wide / mid policy from this size on (options::wide_policy_from_bytes,\n"
    "                 mid_policy_from_bytes; default: the dispatch table's), for ablations\n"
    "  -h             this text\n";

/// What echo-perf has compiled, for messages.
std::string compiled_list() {
  std::string s;
  for (const instance& i : instances())
    s += "\n  -q " + i.name + (i.bits ? " -B " + std::to_string(i.bits) + " -G " + std::to_string(i.group) : "") +
         (i.bf16_cuda_ipc_only ? "   (-t cuda_ipc -d bf16 only)" : "");
  return s;
}

/// The compiled instantiations of c's quantizer; throws usage_error if the table lacks them.
const instance& instance_of(const config& c) {
  for (const instance& i : instances()) {
    if (i.name != c.quant || (i.bits && (i.bits != c.bits || i.group != c.group))) continue;
    if (i.bf16_cuda_ipc_only && (c.transport != transport_kind::cuda_ipc || c.type != echo::dtype::bf16))
      throw usage_error("-q " + c.quant + " is compiled for -t cuda_ipc -d bf16 only");
    return i;
  }
  throw usage_error("-q " + c.quant + " -B " + std::to_string(c.bits) + " -G " + std::to_string(c.group) +
                    " is not compiled into echo-perf; it has:" + compiled_list());
}

long parse_int(char flag, const char* v, long lo, long hi) {
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (!*v || *end || x < lo || x > hi)
    throw usage_error(std::string("-") + flag + ": '" + v + "' is not an integer in [" + std::to_string(lo) + ", " +
                      std::to_string(hi) + "]");
  return x;
}

options parse(int argc, char** argv) {
  options o;
  int c;
  opterr = 0;
  while ((c = getopt(argc, argv, "b:e:f:i:g:n:w:d:q:B:G:c:t:N:D:S:P:W:M:h")) != -1) {
    const std::string v = optarg ? optarg : "";
    try {
      switch (c) {
        case 'b': o.min_bytes = parse_size(v, size_t(64) << 30); break;
        case 'e': o.max_bytes = parse_size(v, size_t(64) << 30); break;
        case 'i': o.step_bytes = parse_size(v, size_t(64) << 30); break;
        case 'f': o.step_factor = parse_int('f', optarg, 1, 1 << 20); break;
        case 'g': o.gpus = static_cast<int>(parse_int('g', optarg, 1, echo_bench::k_max_ranks)); break;
        case 'n': o.iters = static_cast<int>(parse_int('n', optarg, 1, 1 << 20)); break;
        case 'w': o.warmup = static_cast<int>(parse_int('w', optarg, 0, 1 << 20)); break;
        case 'N': o.with_nccl = parse_int('N', optarg, 0, 1) != 0; break;
        case 'D': o.dispatch = parse_int('D', optarg, 0, 1) != 0; break;
        case 'S': o.share = parse_int('S', optarg, 0, 1) != 0; break;
        case 'P': o.profile = parse_int('P', optarg, 0, 1) != 0; break;
        case 'W': o.wide_from = parse_size(v, size_t(64) << 30); break;
        case 'M': o.mid_from = parse_size(v, size_t(64) << 30); break;
        case 'B': o.cfg.bits = static_cast<int>(parse_int('B', optarg, 1, 64)); break;
        case 'G': o.cfg.group = static_cast<int>(parse_int('G', optarg, 1, 1 << 20)); break;
        case 'd':
          if (v == "bf16" || v == "bfloat16") o.cfg.type = echo::dtype::bf16;
          else if (v == "fp16" || v == "half" || v == "float16") o.cfg.type = echo::dtype::f16;
          else if (v == "fp32" || v == "float" || v == "float32") o.cfg.type = echo::dtype::f32;
          else throw usage_error("-d: unknown type '" + v + "' (bf16, fp16, fp32)");
          break;
        case 'q':
          if (v == "?") throw usage_error("compiled quantizers:" + compiled_list());
          o.cfg.quant = v;
          break;
        case 'c':
          if (v == "none") o.cfg.comp = comp_kind::none;
          else if (v == "error_feedback") o.cfg.comp = comp_kind::error_feedback;
          else throw usage_error("-c: unknown compensator '" + v + "' (none, error_feedback)");
          break;
        case 't':
          if (v == "cuda_ipc") o.cfg.transport = transport_kind::cuda_ipc;
          else if (v == "nccl") o.cfg.transport = transport_kind::nccl;
          else throw usage_error("-t: unknown transport '" + v + "' (cuda_ipc, nccl)");
          break;
        case 'h': throw usage_error("");
        default: throw usage_error(std::string("unknown flag or missing value: -") + static_cast<char>(optopt));
      }
    } catch (const std::invalid_argument& e) {  // from parse_size
      throw usage_error(std::string("-") + static_cast<char>(c) + ": " + e.what());
    }
  }
  if (optind < argc) throw usage_error(std::string("unexpected argument '") + argv[optind] + "'");
  if (o.min_bytes > o.max_bytes) throw usage_error("-b is larger than -e");
  if (o.share && o.gpus < 2) throw usage_error("-S 1 needs -g RANKS (at least 2)");
  if (o.profile && o.cfg.transport == transport_kind::nccl)
    throw usage_error("-P 1 needs -t cuda_ipc (transport::nccl's ranks launch from threads of their own)");
  (void)instance_of(o.cfg);
  return o;
}

const char* type_name(echo::dtype t) {  // nccl-tests' names
  return t == echo::dtype::bf16 ? "bfloat16" : t == echo::dtype::f16 ? "half" : "float";
}

std::string config_name(const config& c) {
  const instance& i = instance_of(c);
  return "echo::all_reduce<" + i.type_name + ", " + (c.transport == transport_kind::nccl ? "nccl" : "cuda_ipc") + ", " +
         (c.comp == comp_kind::error_feedback ? "error_feedback<" + std::string(i.ef_storage) + ">" : "none") + ">";
}

/// nccl-tests' time format: 7 wide, fewer decimals as it grows.
std::string time_text(double us) {
  char buf[32];
  std::snprintf(buf, sizeof buf, us >= 10000.0 ? "%7.0f" : us >= 100.0 ? "%7.1f" : "%7.2f", us);
  return buf;
}

std::string centered(const std::string& s, size_t width) {
  const size_t left = (width - s.size()) / 2;
  return std::string(left, ' ') + s + std::string(width - left - s.size(), ' ');
}

struct result {
  double t = 0;  // seconds per call
  error_report err;
};

/// One size, one placement: warm-up, -n timed calls, then one checked call on a fresh chain.
result measure(bench_context& ctx, runner& run, const options& o, size_t n, bool in_place) {
  const size_t bytes = n * echo::size_of(o.cfg.type);
  const auto seed = [bytes](int r) { return echo_bench::splitmix64(0xEC40BE4Full ^ (static_cast<uint64_t>(r) << 56) ^ bytes); };
  result res;
  echo::dispatch_dtype(o.cfg.type, [&](auto tag) {
    using T = decltype(tag);
    ctx.fill<T>(n, seed, in_place);
    if (o.warmup > 0) (void)ctx.time_batch(run, n, o.warmup, in_place);
    if (in_place) ctx.fill<T>(n, seed, true);
    res.t = ctx.time_batch(run, n, o.iters, in_place);
    run.reset_state();
    ctx.fill<T>(n, seed, in_place);
    (void)ctx.time_batch(run, n, 1, in_place, /*settle=*/false);  // exactly one call
    res.err = output_error<T>(ctx, n, seed);
  });
  return res;
}

/// One call of every rank, captured from this thread into one graph (the ranks' streams forked
/// from and joined to rank 0's), launched once untimed and once between cudaProfilerStart and
/// cudaProfilerStop. Throws on a failed capture, launch, or call; frees what it made either way.
void profile_once(bench_context& ctx, runner& run, size_t n) {
  const int P = ctx.size();
  const echo_bench::rank_res& R0 = ctx.rank(0);
  struct resources {  // destroyed on every path (the device of each event current for it)
    bench_context& ctx;
    std::vector<cudaEvent_t> ev;  // ev[0] forks, ev[r] joins rank r
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    bool capturing = false, profiling = false;
    ~resources() {
      (void)cudaSetDevice(ctx.rank(0).device);
      if (capturing) {
        cudaGraph_t broken = nullptr;
        if (cudaStreamEndCapture(ctx.rank(0).stream, &broken) == cudaSuccess && broken) (void)cudaGraphDestroy(broken);
      }
      if (profiling) (void)cudaProfilerStop();
      if (exec) (void)cudaGraphExecDestroy(exec);
      if (graph) (void)cudaGraphDestroy(graph);
      for (size_t r = 0; r < ev.size(); ++r) {
        if (!ev[r]) continue;
        (void)cudaSetDevice(ctx.rank(static_cast<int>(r)).device);
        (void)cudaEventDestroy(ev[r]);
      }
      (void)cudaSetDevice(ctx.rank(0).device);
      (void)cudaGetLastError();
    }
  } res{ctx, std::vector<cudaEvent_t>(static_cast<size_t>(P), nullptr)};
  for (int r = 0; r < P; ++r) {
    ECHO_CUDA_TRY(cudaSetDevice(ctx.rank(r).device));
    ECHO_CUDA_TRY(cudaEventCreateWithFlags(&res.ev[static_cast<size_t>(r)], cudaEventDisableTiming));
  }
  ECHO_CUDA_TRY(cudaSetDevice(R0.device));
  ECHO_CUDA_TRY(cudaStreamBeginCapture(R0.stream, cudaStreamCaptureModeRelaxed));
  res.capturing = true;
  ECHO_CUDA_TRY(cudaEventRecord(res.ev[0], R0.stream));
  for (int r = 1; r < P; ++r) {
    ECHO_CUDA_TRY(cudaSetDevice(ctx.rank(r).device));
    ECHO_CUDA_TRY(cudaStreamWaitEvent(ctx.rank(r).stream, res.ev[0], 0));
  }
  run.call(n, false);
  for (int r = 1; r < P; ++r) {
    ECHO_CUDA_TRY(cudaSetDevice(ctx.rank(r).device));
    ECHO_CUDA_TRY(cudaEventRecord(res.ev[static_cast<size_t>(r)], ctx.rank(r).stream));
    ECHO_CUDA_TRY(cudaSetDevice(R0.device));
    ECHO_CUDA_TRY(cudaStreamWaitEvent(R0.stream, res.ev[static_cast<size_t>(r)], 0));
  }
  ECHO_CUDA_TRY(cudaSetDevice(R0.device));
  res.capturing = false;
  ECHO_CUDA_TRY(cudaStreamEndCapture(R0.stream, &res.graph));
  ECHO_CUDA_TRY(cudaGraphInstantiate(&res.exec, res.graph, 0));
  ECHO_CUDA_TRY(cudaGraphLaunch(res.exec, R0.stream));  // untimed, unprofiled: first-launch costs
  ECHO_CUDA_TRY(cudaStreamSynchronize(R0.stream));
  ECHO_CUDA_TRY(cudaProfilerStart());
  res.profiling = true;
  ECHO_CUDA_TRY(cudaGraphLaunch(res.exec, R0.stream));
  ECHO_CUDA_TRY(cudaStreamSynchronize(R0.stream));
  res.profiling = false;
  ECHO_CUDA_TRY(cudaProfilerStop());
  run.check();
}

int run(const options& o) {
  int visible = 0;
  const cudaError_t e = cudaGetDeviceCount(&visible);
  const std::string why = e == cudaSuccess ? "" : std::string("; cudaGetDeviceCount: ") + cudaGetErrorString(e);
  if (e != cudaSuccess) visible = 0;
  (void)cudaGetLastError();
  const int P = o.gpus ? o.gpus : std::min(visible, echo_bench::k_max_ranks);
  if (visible < (o.share ? 1 : 2) || P < 2) {
    std::printf("SKIPPED: echo-perf needs %s (found %d GPU(s)%s%s)\n", o.share ? "a GPU" : "2 GPUs", visible,
                o.gpus == 1 ? ", -g 1" : "", why.c_str());
    return 77;
  }
  if (P > visible && !o.share) {
    std::fprintf(stderr, "echo-perf: -g %d but only %d GPU(s) visible (-S 1 lets ranks share them)\n", P, visible);
    return 2;
  }
  if (P > visible && o.cfg.transport == transport_kind::nccl) {
    std::fprintf(stderr, "echo-perf: -t nccl needs a GPU a rank (NCCL refuses two ranks on one GPU): -g %d, %d visible\n",
                 P, visible);
    return 2;
  }
  const bool with_nccl = o.with_nccl && P <= visible;  // the NCCL rows; NCCL refuses two ranks on one GPU
  const size_t elem = echo::size_of(o.cfg.type);
  std::vector<int> devices(static_cast<size_t>(P));
  for (int r = 0; r < P; ++r) devices[static_cast<size_t>(r)] = r % visible;
  const size_t buffer_bytes = std::max(o.max_bytes / elem, size_t(1)) * elem;

  // NCCL communicators for the NCCL rows and for transport::nccl's engine.
  bench_context ctx(devices, buffer_bytes, with_nccl || o.cfg.transport == transport_kind::nccl);
  echo_runner_options ro;
  ro.max_elements = buffer_bytes / elem;
  ro.forced = !o.dispatch;
  ro.wide_from = o.wide_from;
  ro.mid_from = o.mid_from;
  std::unique_ptr<runner> echo_run = instance_of(o.cfg).make(ctx, o.cfg, ro);
  std::unique_ptr<runner> nccl_run;
  if (with_nccl) nccl_run = std::make_unique<echo_bench::nccl_runner>(ctx, echo::dispatch_dtype(o.cfg.type, [](auto tag) {
                                return echo_bench::nccl_type<decltype(tag)>();
                              }));

  int nccl_version = 0;
  (void)ncclGetVersion(&nccl_version);
  std::printf("# echo-perf: %s, %s, sum; %s%s\n", config_name(o.cfg).c_str(), type_name(o.cfg.type),
              o.dispatch ? "the size dispatch of echo::tuning::dispatch_table" : "the quantizer at every size",
              with_nccl ? "; NCCL's ncclAllReduce in the same run (lib nccl)" : "");
  if (P > visible)
    std::printf("# %d ranks on %d GPU(s) (-S 1): their peer traffic stays on a GPU; times are not link times\n", P,
                visible);
  if (o.profile) std::printf("# -P 1: one graph-captured call of every rank a size, inside a profiler range\n");
  if (o.wide_from || o.mid_from) {
    const auto size = [](const std::optional<size_t>& v) { return v ? std::to_string(*v) : std::string("the table's"); };
    std::printf("# -W %s -M %s: the wide / mid policy from these sizes on\n", size(o.wide_from).c_str(),
                size(o.mid_from).c_str());
  }
  std::printf("# nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d validation: error vs the "
              "exact fp64 sum\n",
              P, o.min_bytes, o.max_bytes, o.step_factor > 1 ? static_cast<size_t>(o.step_factor) : o.step_bytes,
              o.step_factor > 1 ? "factor" : "bytes", o.warmup, o.iters);
  std::printf("# Echo %d.%d.%d, NCCL %d.%d.%d\n#\n# Using devices\n", ECHO_VERSION_MAJOR, ECHO_VERSION_MINOR,
              ECHO_VERSION_PATCH, nccl_version / 10000, nccl_version / 100 % 100, nccl_version % 100);
  for (int r = 0; r < P; ++r) {
    cudaDeviceProp prop{};
    ECHO_CUDA_TRY(cudaGetDeviceProperties(&prop, devices[static_cast<size_t>(r)]));
    std::printf("#  Rank %2d device %2d [0x%02x] %s\n", r, devices[static_cast<size_t>(r)], prop.pciBusID, prop.name);
  }
  std::printf("#%s%s%s\n", std::string(41, ' ').c_str(), centered("out-of-place", 43).c_str(), centered("in-place", 43).c_str());
  std::printf("# %10s  %12s  %8s  %4s  %7s  %6s  %6s  %7s  %7s  %7s  %6s  %6s  %7s  %7s  %7s\n", "size", "count", "type",
              "lib", "time", "algbw", "busbw", "maxerr", "rmserr", "time", "algbw", "busbw", "maxerr", "rmserr",
              "vs nccl");
  std::printf("# %10s  %12s  %8s  %4s  %7s  %6s  %6s  %7s  %7s  %7s  %6s  %6s  %7s  %7s  %7s\n", "(B)", "(elements)", "",
              "", "(us)", "(GB/s)", "(GB/s)", "", "", "(us)", "(GB/s)", "(GB/s)", "", "", "");
  std::fflush(stdout);

  const double bus = 2.0 * (P - 1) / P;
  double bw_sum[2] = {0, 0};
  int bw_count[2] = {0, 0};
  for (size_t size = o.min_bytes; size <= o.max_bytes;
       size = o.step_factor > 1 ? size * static_cast<size_t>(o.step_factor) : size + o.step_bytes) {
    const size_t n = size / elem;
    if (n == 0) continue;
    const size_t bytes = n * elem;
    result r[2][2];  // [lib: echo, nccl][out-of-place, in-place]
    for (int lib = 0; lib < (with_nccl ? 2 : 1); ++lib)
      for (int place = 0; place < 2; ++place) r[lib][place] = measure(ctx, lib ? *nccl_run : *echo_run, o, n, place == 1);
    for (int lib = 0; lib < (with_nccl ? 2 : 1); ++lib) {
      std::printf("%12zu  %12zu  %8s  %4s", bytes, n, type_name(o.cfg.type), lib ? "nccl" : "echo");
      for (int place = 0; place < 2; ++place) {
        const result& x = r[lib][place];
        const double algbw = static_cast<double>(bytes) / x.t / 1e9;
        std::printf("  %7s  %6.2f  %6.2f  %7.1e  %7.1e", time_text(x.t * 1e6).c_str(), algbw, algbw * bus,
                    x.err.max_rel, x.err.rms_rel);
        bw_sum[lib] += algbw * bus;
        ++bw_count[lib];
      }
      if (lib == 0 && with_nccl) std::printf("  %6.2fx\n", r[1][0].t / r[0][0].t);
      else std::printf("  %7s\n", "-");
    }
    if (o.profile) {
      profile_once(ctx, *echo_run, n);
      std::printf("# profiled: one call of %zu bytes on every rank (graph)\n", bytes);
    }
    std::fflush(stdout);
  }
  std::printf("# Avg bus bandwidth    : %g\n", bw_count[0] ? bw_sum[0] / bw_count[0] : 0.0);
  if (with_nccl) std::printf("# Avg bus bandwidth NCCL: %g\n", bw_count[1] ? bw_sum[1] / bw_count[1] : 0.0);
  std::printf("#\n");
  return 0;
}

}  // namespace
}  // namespace echo_perf

int main(int argc, char** argv) {
  echo_perf::options o;
  try {
    o = echo_perf::parse(argc, argv);
  } catch (const echo_perf::usage_error& e) {
    if (!*e.what()) {
      std::fputs(echo_perf::usage_text, stdout);
      return 0;
    }
    std::fprintf(stderr, "echo-perf: %s (echo-perf -h lists the flags)\n", e.what());
    return 2;
  }
  try {
    return echo_perf::run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "echo-perf: %s\n", e.what());
    return 1;
  }
}
