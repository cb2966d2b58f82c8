// echo_bench: Echo's all-reduce against NCCL's bf16 all-reduce, in one process, on every visible
// GPU (P ranks, one per GPU; ECHO_BENCH_GPUS=N uses the first N). With fewer than 2 GPUs it
// prints "SKIPPED: ..." and exits 0.
//
// Variants (the table k_variants below; a new variant is one line there):
//   nccl              ncclAllReduce(bf16, sum) on every rank inside ncclGroupStart/End
//   echo_none16       echo::all_reduce<quant::none>: the 16-bit path through Echo's pipeline
//   echo_int4         zero_aware<4,128>, comp::none
//   echo_int4_ef      zero_aware<4,128>, error_feedback<bfloat16_t>, fused state update, one chain a rank
//   echo_int4_ef32    zero_aware<4,128>, error_feedback<float>
//   echo_int8         zero_aware<8,128>, comp::none
//   echo_int8_ef      zero_aware<8,128>, error_feedback<bfloat16_t>
//   echo_dispatch     zero_aware<4,128> with default options: the size dispatch of echo::dispatch_table
//                     (what a user gets).
//   echo_nccl_int4    zero_aware<4,128>, comp::none, over echo::transport::nccl (ncclSend/ncclRecv)
//   echo_nccl_int4_ef zero_aware<4,128>, error_feedback<bfloat16_t>, transport::nccl, one chain a rank
//   echo_nccl_int8    zero_aware<8,128>, comp::none, transport::nccl
// The echo_* variants without "nccl" in the name use transport::cuda_ipc (peer loads over
// NVLink / PCIe, never through NCCL). Every echo_* variant except echo_dispatch forces its path
// (passthrough_below_bytes = 0).
// Sizes: 64 KiB .. 1 GiB of bf16 (n = bytes / 2), out of place, random normal inputs (std 1),
// different on every rank. ECHO_BENCH_SIZES restricts them (below).
//
// Timing: one call = every rank launches on its own non-blocking stream. For nccl and the
// cuda_ipc variants one host thread issues every rank's launches (NCCL's inside a group). The
// transport::nccl variants issue ncclSend/ncclRecv group calls inside each rank's call, which
// one thread driving several ranks cannot do (it would deadlock): each rank's calls come from
// that rank's own persistent worker thread (rank_pool; the main thread hands every worker "run
// k calls" and waits for all of them). Either way a batch of calls is bracketed by CUDA events on
// every rank's stream; a batch's time is the largest elapsed time over the ranks. After a warm-up
// (5 calls) and a probe that sizes the batch (~2 ms of work, 1..200 calls), the reported time per
// call is the median of 20 batches (10 at >= 256 MiB), fewer (at least 3) once a measurement has
// run 15 s counted from after its first call (the first call may set up NCCL connections): a slow
// transport (NCCL over sockets: ~85 ms a call at 256 MiB, ~0.35 s at 1 GiB extrapolated) stays within
// ~15 s per size and variant. Reported through state.SetIterationTime (UseManualTime, one
// iteration). Counters: time_us, algbw_GBps = bytes / t, busbw_GBps = algbw * 2(P-1)/P,
// speedup_vs_nccl = t_nccl / t at the same size, NCCL measured in this process (first, or on
// demand when a filter leaves it out), batches and calls_per_batch.
// A transport::nccl batch that does not finish within 120 s (a hung NCCL connection, or a rank
// that failed to launch while its peers wait for it in NCCL) cannot be recovered in-process:
// echo_bench prints what it has and exits 1.
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
#include <echo/echo.cuh>

#include <benchmark/benchmark.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <unistd.h>  // environ

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace {

using bf16 = __nv_bfloat16;

// ---- what is measured ---------------------------------------------------------------------------

constexpr size_t KiB = size_t(1) << 10, MiB = size_t(1) << 20, GiB = size_t(1) << 30;
constexpr size_t k_default_sizes[] = {64 * KiB, 256 * KiB, 1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB, 1 * GiB};
constexpr size_t k_max_bytes = 1 * GiB;  // the largest size ECHO_BENCH_SIZES may ask for
// Every Echo object is built for 1 GiB whatever ECHO_BENCH_SIZES selects, so a size's result does
// not depend on which other sizes were run (the transport::nccl chunk size follows max_elements).
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
constexpr double k_hang_s = 120.0;          // a transport::nccl batch still running after this is a hang

std::vector<size_t> g_sizes(std::begin(k_default_sizes), std::end(k_default_sizes));  // ECHO_BENCH_SIZES
std::string g_label;                                                                  // ECHO_BENCH_LABEL

std::string human_bytes(size_t b) {
  char buf[32];
  if (b >= GiB && b % GiB == 0) std::snprintf(buf, sizeof buf, "%zuGiB", b / GiB);
  else if (b >= MiB && b % MiB == 0) std::snprintf(buf, sizeof buf, "%zuMiB", b / MiB);
  else if (b >= KiB && b % KiB == 0) std::snprintf(buf, sizeof buf, "%zuKiB", b / KiB);
  else std::snprintf(buf, sizeof buf, "%zuB", b);
  return buf;
}

#define BENCH_CUDA(expr) ECHO_CUDA_TRY(expr)
#define BENCH_NCCL(expr) ECHO_NCCL_TRY(expr)

/// One ECHO_BENCH_SIZES entry: decimal bytes with an optional binary suffix K / M / G (also
/// written KB / KiB, ...; any case). Throws std::invalid_argument with the reason.
size_t parse_size(const std::string& item) {
  size_t b = 0, e = item.size();
  while (b < e && std::isspace(static_cast<unsigned char>(item[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(item[e - 1]))) --e;
  const std::string s = item.substr(b, e - b);
  size_t digits = 0;
  while (digits < s.size() && std::isdigit(static_cast<unsigned char>(s[digits]))) ++digits;
  if (digits == 0 || digits > 12) throw std::invalid_argument("'" + s + "' is not a size (digits, then K, M or G)");
  std::string suffix = s.substr(digits);
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  size_t unit = 1;
  if (!suffix.empty() && suffix != "B") {
    const char u = suffix[0];
    unit = u == 'K' ? KiB : u == 'M' ? MiB : u == 'G' ? GiB : 0;
    const std::string rest = suffix.substr(1);
    if (unit == 0 || !(rest.empty() || rest == "B" || rest == "IB"))
      throw std::invalid_argument("'" + s + "': unknown suffix '" + s.substr(digits) + "' (K, M or G)");
  }
  const size_t v = std::stoull(s.substr(0, digits));
  if (v == 0) throw std::invalid_argument("'" + s + "': a size must be > 0");
  if (v > k_max_bytes / unit) throw std::invalid_argument("'" + s + "': at most 1G");
  const size_t bytes = v * unit;
  if (bytes % sizeof(bf16) != 0) throw std::invalid_argument("'" + s + "': bf16 needs an even number of bytes");
  return bytes;
}

/// ECHO_BENCH_SIZES: a comma list, sorted ascending, duplicates dropped.
std::vector<size_t> parse_sizes(const std::string& list) {
  std::vector<size_t> out;
  size_t pos = 0;
  while (true) {
    const size_t comma = list.find(',', pos);
    const std::string item = list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (item.find_first_not_of(" \t") == std::string::npos) {
      if (comma == std::string::npos && !out.empty()) break;  // tolerate one trailing comma
      throw std::invalid_argument("empty entry");
    }
    out.push_back(parse_size(item));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

/// Prints what was measured so far and exits 1: for a transport::nccl batch that hung (its peers
/// wait inside NCCL, so the process cannot recover). Defined after the summary.
[[noreturn]] void fatal_hang(const std::string& what);

// ---- inputs: N(0, 1) bf16 from a counter-based hash (Box-Muller), never exactly zero ---------

__host__ __device__ inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

__global__ void fill_normal_bf16(bf16* x, size_t n, uint64_t seed) {
  const size_t pairs = (n + 1) / 2;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < pairs; i += stride) {
    const uint64_t h = splitmix64(seed ^ (i * 0xD6E8FEB86659FD93ull));
    // Both uniforms lie strictly inside (0, 1) on a 2^-23 grid offset by half a step, so r > 0
    // and 2 u2 is never a multiple of 1/2: neither output can be zero.
    const float u1 = (static_cast<float>(static_cast<uint32_t>(h >> 41)) + 0.5f) * 0x1p-23f;
    const float u2 = (static_cast<float>(static_cast<uint32_t>(h >> 8) & 0x7FFFFFu) + 0.5f) * 0x1p-23f;
    const float r = sqrtf(-2.0f * logf(u1));
    float s, c;
    sincospif(2.0f * u2, &s, &c);
    x[2 * i] = __float2bfloat16_rn(r * c);
    if (2 * i + 1 < n) x[2 * i + 1] = __float2bfloat16_rn(r * s);
  }
}

// ---- the process-wide setup: GPUs, communicators, streams, events, buffers ---------------------

struct rank_res {
  int device = 0;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  bf16* in = nullptr;
  bf16* out = nullptr;
};

/// One persistent host thread per rank (its device current) for the variants whose calls must be
/// issued by each rank's own thread. run(job) runs job(r) on every worker at once and waits.
class rank_pool {
 public:
  explicit rank_pool(const std::vector<int>& devices) : errors_(devices.size()) {
    try {
      for (size_t r = 0; r < devices.size(); ++r)
        threads_.emplace_back([this, r, d = devices[r]] { work(static_cast<int>(r), d); });
    } catch (...) {
      stop_and_join();
      throw;
    }
  }
  rank_pool(const rank_pool&) = delete;
  rank_pool& operator=(const rank_pool&) = delete;
  ~rank_pool() { stop_and_join(); }

  /// job(r) on every rank's thread. False if some worker has not returned after timeout_s (then
  /// the pool is unusable: the caller must not return to code that destroys it; see fatal_hang).
  /// Otherwise errors[r] holds what job(r) threw, if anything.
  bool run(const std::function<void(int)>& job, double timeout_s, std::vector<std::exception_ptr>& errors) {
    std::unique_lock<std::mutex> lk(m_);
    job_ = &job;
    pending_ = threads_.size();
    std::fill(errors_.begin(), errors_.end(), nullptr);
    ++generation_;
    start_.notify_all();
    if (!done_.wait_for(lk, std::chrono::duration<double>(timeout_s), [&] { return pending_ == 0; })) return false;
    job_ = nullptr;
    errors = errors_;
    return true;
  }

 private:
  void work(int r, int device) {
    const cudaError_t set = cudaSetDevice(device);
    uint64_t seen = 0;
    while (true) {
      const std::function<void(int)>* job = nullptr;
      {
        std::unique_lock<std::mutex> lk(m_);
        start_.wait(lk, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        job = job_;
      }
      std::exception_ptr err;
      try {
        if (set != cudaSuccess)
          throw std::runtime_error("worker thread of rank " + std::to_string(r) + ": cudaSetDevice(" +
                                   std::to_string(device) + "): " + cudaGetErrorString(set));
        (*job)(r);
      } catch (...) {
        err = std::current_exception();
      }
      std::lock_guard<std::mutex> lk(m_);
      errors_[static_cast<size_t>(r)] = err;
      if (--pending_ == 0) done_.notify_all();
    }
  }

  void stop_and_join() {
    {
      std::lock_guard<std::mutex> lk(m_);
      stop_ = true;
    }
    start_.notify_all();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

  std::mutex m_;
  std::condition_variable start_, done_;
  std::vector<std::thread> threads_;
  std::vector<std::exception_ptr> errors_;
  const std::function<void(int)>* job_ = nullptr;
  size_t pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

class bench_context;

/// One variant's objects on every rank; call() launches one all-reduce of n elements on all ranks.
class runner {
 public:
  virtual ~runner() = default;
  /// Launch one call on every rank (stream-ordered, no sync) from this one thread. Throws on a
  /// failed launch.
  virtual void call(size_t n) = 0;
  /// True when every rank's calls must be issued from that rank's own thread (transport::nccl):
  /// time_batch then runs call_rank(r, n) on rank r's worker instead of call(n).
  virtual bool per_rank_threads() const { return false; }
  /// Launch one call on rank r only (its device is current). Throws on a failed launch.
  virtual void call_rank(int, size_t) { throw std::logic_error("echo_bench: call_rank on a single-thread variant"); }
  /// After the streams are synchronized: throw if any rank timed out.
  virtual void check() const {}
  /// The path a call of `bytes` takes ("nccl", "none16", or the quantizer), for the label.
  virtual std::string path(size_t bytes) const = 0;
  /// True when the path depends on the size (echo::dispatch_table thresholds).
  virtual bool size_dispatch() const { return false; }
};

class bench_context {
 public:
  explicit bench_context(const std::vector<int>& devices) {
    ranks_.resize(devices.size());
    for (size_t r = 0; r < devices.size(); ++r) {
      rank_res& R = ranks_[r];
      R.device = devices[r];
      BENCH_CUDA(cudaSetDevice(R.device));
      BENCH_CUDA(cudaStreamCreateWithFlags(&R.stream, cudaStreamNonBlocking));
      BENCH_CUDA(cudaEventCreate(&R.start));
      BENCH_CUDA(cudaEventCreate(&R.stop));
      BENCH_CUDA(cudaMalloc(&R.in, k_max_bytes));
      BENCH_CUDA(cudaMalloc(&R.out, k_max_bytes));
      BENCH_CUDA(cudaMemset(R.out, 0, k_max_bytes));
    }
    comms_ = echo::communicator::local(devices);  // also ncclCommInitAll: comms_[r].nccl()
  }

  bench_context(const bench_context&) = delete;
  bench_context& operator=(const bench_context&) = delete;

  ~bench_context() {
    runners_.clear();  // Echo objects first (their destructors select each rank's device)
    pool_.reset();     // idle workers (a hung one never gets here: fatal_hang exits)
    echo::communicator::destroy(comms_);
    for (rank_res& R : ranks_) {
      (void)cudaSetDevice(R.device);
      if (R.in) (void)cudaFree(R.in);
      if (R.out) (void)cudaFree(R.out);
      if (R.start) (void)cudaEventDestroy(R.start);
      if (R.stop) (void)cudaEventDestroy(R.stop);
      if (R.stream) (void)cudaStreamDestroy(R.stream);
    }
  }

  int size() const { return static_cast<int>(ranks_.size()); }
  const rank_res& rank(int r) const { return ranks_[static_cast<size_t>(r)]; }
  const std::vector<echo::communicator>& comms() const { return comms_; }

  /// Fresh N(0,1) inputs of n elements on every rank (a different stream of numbers per rank
  /// and per size); regenerated only when n changes.
  void ensure_inputs(size_t n) {
    if (inputs_n_ == n) return;
    inputs_n_ = 0;
    for (int r = 0; r < size(); ++r) {
      const rank_res& R = rank(r);
      BENCH_CUDA(cudaSetDevice(R.device));
      const uint64_t seed = splitmix64(0xEC40BE4Cull ^ (static_cast<uint64_t>(r) << 56) ^ n);
      fill_normal_bf16<<<2048, 256, 0, R.stream>>>(R.in, n, seed);
      BENCH_CUDA(cudaGetLastError());
    }
    sync_all();
    inputs_n_ = n;
  }

  void sync_all() {
    for (const rank_res& R : ranks_) {
      BENCH_CUDA(cudaSetDevice(R.device));
      BENCH_CUDA(cudaStreamSynchronize(R.stream));
    }
  }

  /// Seconds per call of a batch of `calls` calls: the largest event time over the ranks.
  double time_batch(runner& run, size_t n, int calls) {
    if (run.per_rank_threads()) {
      time_batch_threaded(run, n, calls);
    } else {
      time_batch_single(run, n, calls);
    }
    run.check();
    float worst_ms = 0.0f;
    for (const rank_res& R : ranks_) {
      float ms = 0.0f;
      BENCH_CUDA(cudaEventElapsedTime(&ms, R.start, R.stop));
      worst_ms = std::max(worst_ms, ms);
    }
    return 1e-3 * static_cast<double>(worst_ms) / calls;
  }

  /// One thread issues every rank's launches; returns with the streams synchronized.
  void time_batch_single(runner& run, size_t n, int calls) {
    for (const rank_res& R : ranks_) {
      BENCH_CUDA(cudaSetDevice(R.device));
      BENCH_CUDA(cudaEventRecord(R.start, R.stream));
    }
    for (int i = 0; i < calls; ++i) {
      try {
        run.call(n);
      } catch (...) {
        // Let whatever was launched drain (a rank whose peer never launched times out within the
        // spin limit) so the next benchmark starts from idle streams.
        for (const rank_res& R : ranks_) {
          (void)cudaSetDevice(R.device);
          (void)cudaStreamSynchronize(R.stream);
        }
        throw;
      }
    }
    for (const rank_res& R : ranks_) {
      BENCH_CUDA(cudaSetDevice(R.device));
      BENCH_CUDA(cudaEventRecord(R.stop, R.stream));
    }
    sync_all();
  }

  /// Every rank's worker records its start event, issues `calls` calls and records its stop
  /// event; returns with the streams drained. A rank that failed to launch leaves its peers
  /// waiting inside NCCL: if they do not drain, that is fatal (fatal_hang).
  void time_batch_threaded(runner& run, size_t n, int calls) {
    if (!pool_) {
      std::vector<int> devices;
      for (const rank_res& R : ranks_) devices.push_back(R.device);
      pool_ = std::make_unique<rank_pool>(devices);
    }
    const auto job = [&](int r) {
      const rank_res& R = rank(r);
      BENCH_CUDA(cudaSetDevice(R.device));
      BENCH_CUDA(cudaEventRecord(R.start, R.stream));
      for (int i = 0; i < calls; ++i) run.call_rank(r, n);
      BENCH_CUDA(cudaEventRecord(R.stop, R.stream));
    };
    std::vector<std::exception_ptr> errors;
    if (!pool_->run(job, k_hang_s, errors))
      fatal_hang("a worker thread is still issuing its calls after " + std::to_string(static_cast<int>(k_hang_s)) +
                 " s (blocked inside NCCL?)");
    std::string failed;
    for (size_t r = 0; r < errors.size(); ++r) {
      if (!errors[r]) continue;
      try {
        std::rethrow_exception(errors[r]);
      } catch (const std::exception& e) {
        failed += (failed.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + ": " + e.what();
      } catch (...) {
        failed += (failed.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + ": unknown exception";
      }
    }
    if (!failed.empty()) {
      // Whatever the other ranks launched waits for the failed rank in NCCL: it may never drain.
      if (!drain(10.0)) fatal_hang(failed + "; the other ranks did not drain within 10 s");
      throw std::runtime_error(failed);
    }
    if (!drain(k_hang_s))
      fatal_hang("the streams did not drain within " + std::to_string(static_cast<int>(k_hang_s)) + " s");
  }

  /// Wait (polling, from this thread) until every rank's stream is idle; false after timeout_s.
  bool drain(double timeout_s) {
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t r = 0; r < ranks_.size();) {
      const cudaError_t e = cudaStreamQuery(ranks_[r].stream);
      if (e == cudaSuccess) {
        ++r;
        continue;
      }
      if (e != cudaErrorNotReady) BENCH_CUDA(e);
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    return true;
  }

  struct measurement {
    double t = NAN;  // median seconds per call
    int batches = 0, calls = 0;
  };

  /// Median seconds per call of `bytes` for this runner (see the file header).
  measurement measure(runner& run, size_t bytes) {
    const size_t n = bytes / sizeof(bf16);
    ensure_inputs(n);
    // The first call may set up NCCL connections (seconds over sockets): outside the wall cap.
    (void)time_batch(run, n, 1);
    const auto t0 = std::chrono::steady_clock::now();
    if (k_warmup_calls > 1) (void)time_batch(run, n, k_warmup_calls - 1);
    const double est = time_batch(run, n, k_probe_calls);
    const int calls = static_cast<int>(std::clamp(std::ceil(k_target_batch_s / std::max(est, 1e-9)), 1.0,
                                                  static_cast<double>(k_max_batch_calls)));
    const int reps = bytes >= k_large_bytes ? k_reps_large : k_reps;
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
      t.push_back(time_batch(run, n, calls));
      const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (t.size() >= 3 && wall > k_wall_cap_s) break;
    }
    std::sort(t.begin(), t.end());
    const size_t m = t.size() / 2;
    return {t.size() % 2 ? t[m] : 0.5 * (t[m - 1] + t[m]), static_cast<int>(t.size()), calls};
  }

  /// The runner of variant v, built on first use (collectively, max_elements = 1 GiB / 2). A
  /// failed construction is remembered and rethrown, not retried.
  runner& get(size_t v);

  /// NCCL's seconds per call at `bytes`: cached, measured on demand. NaN if NCCL fails.
  double nccl_time(size_t bytes);
  void set_nccl_time(size_t bytes, double t) { nccl_time_[bytes] = t; }

 private:
  std::vector<rank_res> ranks_;
  std::vector<echo::communicator> comms_;
  std::map<size_t, std::unique_ptr<runner>> runners_;
  std::map<size_t, std::string> failed_;
  std::map<size_t, double> nccl_time_;
  std::unique_ptr<rank_pool> pool_;  // made on the first per_rank_threads() batch
  size_t inputs_n_ = 0;
};

// ---- variants --------------------------------------------------------------------------------

class nccl_runner final : public runner {
 public:
  explicit nccl_runner(bench_context& ctx) : ctx_(ctx) {
    for (const auto& c : ctx.comms())
      ECHO_REQUIRE(c.nccl() != nullptr, "echo_bench", "communicator::local made no NCCL communicator");
  }
  void call(size_t n) override {
    BENCH_NCCL(ncclGroupStart());
    ncclResult_t first = ncclSuccess;
    for (int r = 0; r < ctx_.size() && first == ncclSuccess; ++r) {
      const rank_res& R = ctx_.rank(r);
      BENCH_CUDA(cudaSetDevice(R.device));
      first = ncclAllReduce(R.in, R.out, n, ncclBfloat16, ncclSum, ctx_.comms()[static_cast<size_t>(r)].nccl(), R.stream);
    }
    const ncclResult_t end = ncclGroupEnd();
    if (first != ncclSuccess) throw std::runtime_error(std::string("ncclAllReduce: ") + ncclGetErrorString(first));
    if (end != ncclSuccess) throw std::runtime_error(std::string("ncclGroupEnd: ") + ncclGetErrorString(end));
  }
  std::string path(size_t) const override { return "nccl"; }

 private:
  bench_context& ctx_;
};

enum class path_choice { forced, dispatch };

template <class Q, class C, path_choice Path, class Transport, class Policy>
class echo_runner final : public runner {
  using AR = echo::all_reduce<Q, Transport, C, Policy>;
  using chain_t = typename AR::chain_type;  // echo::no_chain when C keeps no state
  // transport::nccl issues ncclSend/ncclRecv group calls inside every call: one thread a rank.
  static constexpr bool threaded = std::is_same<Transport, echo::transport::nccl>::value;

 public:
  explicit echo_runner(bench_context& ctx) : ctx_(ctx), ar_(static_cast<size_t>(ctx.size())), ch_(ar_.size()) {
    typename AR::options opt{};
    if (const char* w = std::getenv("ECHO_BENCH_WORKSPACE_MIB")) opt.workspace_bytes = std::strtoull(w, nullptr, 10) << 20;
    if constexpr (Path == path_choice::forced) {
      opt.passthrough_below_bytes = 0;
    }
    try {
      echo::for_each_rank(ctx.comms(), [&](const echo::communicator& c) {
        const size_t r = static_cast<size_t>(c.rank());  // each thread writes only its own slot
        ar_[r] = std::make_unique<AR>(c, k_max_elements, opt);
        if constexpr (C::enabled) ch_[r] = std::make_unique<chain_t>(k_max_elements);
      });
    } catch (...) {
      release();
      throw;
    }
  }
  ~echo_runner() override { release(); }

  bool per_rank_threads() const override { return threaded; }

  void call_rank(int r, size_t n) override {
    if constexpr (!threaded) {
      runner::call_rank(r, n);
    } else {
      const rank_res& R = ctx_.rank(r);
      AR& ar = *ar_[static_cast<size_t>(r)];
      echo::status st;
      if constexpr (C::enabled) st = ar(R.in, R.out, n, R.stream, ch_[static_cast<size_t>(r)].get());
      else st = ar(R.in, R.out, n, R.stream);
      if (st != echo::status::success) throw std::runtime_error(call_error(r, st));
    }
  }

  void call(size_t n) override {
    if constexpr (threaded)
      throw std::logic_error("echo_bench: a transport::nccl variant driven from one thread (would deadlock)");
    echo::status st = echo::status::success;
    int bad = -1;
    for (int r = 0; r < ctx_.size() && st == echo::status::success; ++r) {
      const rank_res& R = ctx_.rank(r);
      if (cudaSetDevice(R.device) != cudaSuccess) {
        st = echo::status::cuda_error;
      } else {
        AR& ar = *ar_[static_cast<size_t>(r)];
        if constexpr (C::enabled) st = ar(R.in, R.out, n, R.stream, ch_[static_cast<size_t>(r)].get());
        else st = ar(R.in, R.out, n, R.stream);
      }
      if (st != echo::status::success) bad = r;
    }
    if (st != echo::status::success) throw std::runtime_error(call_error(bad, st));
  }

  void check() const override {
    for (size_t r = 0; r < ar_.size(); ++r) {
      const echo::status st = ar_[r]->check();
      if (st != echo::status::success)
        throw std::runtime_error("echo::all_reduce::check() on rank " + std::to_string(r) + ": " + echo::to_string(st));
    }
  }

  bool size_dispatch() const override { return Path == path_choice::dispatch; }

  std::string path(size_t bytes) const override {
    if (bytes < ar_[0]->passthrough_below_bytes()) return "none16";
    if constexpr (Q::passthrough) return "none16";
    else return std::string(Q::name) + "<" + std::to_string(Q::bits) + "," + std::to_string(Q::group) + ">";
  }

 private:
  static std::string call_error(int r, echo::status st) {
    std::string msg = "echo::all_reduce on rank " + std::to_string(r) + ": " + echo::to_string(st);
    if (st == echo::status::cuda_error) msg += std::string(" (") + cudaGetErrorString(cudaGetLastError()) + ")";
    return msg;
  }

  void release() {
    for (int r = 0; r < ctx_.size(); ++r) {
      (void)cudaSetDevice(ctx_.rank(r).device);
      ch_[static_cast<size_t>(r)].reset();
      ar_[static_cast<size_t>(r)].reset();
    }
  }

  bench_context& ctx_;
  std::vector<std::unique_ptr<AR>> ar_;
  std::vector<std::unique_ptr<chain_t>> ch_;
};

template <class Q, class C, path_choice Path = path_choice::forced, class Transport = echo::transport::cuda_ipc,
          class Policy = echo::collective::default_policy>
std::unique_ptr<runner> make_echo(bench_context& ctx) {
  return std::make_unique<echo_runner<Q, C, Path, Transport, Policy>>(ctx);
}
/// Tuning ablation: the same int4 path under another pipeline policy (results are identical).
template <int Threads, int Blocks, int FlagElems>
std::unique_ptr<runner> make_echo_policy(bench_context& ctx) {
  return make_echo<echo::quant::zero_aware<4, 128>, echo::comp::none, path_choice::forced, echo::transport::cuda_ipc,
                   echo::collective::pipeline_policy<Threads, Blocks, FlagElems>>(ctx);
}
template <class Q, class C>
std::unique_ptr<runner> make_echo_nccl(bench_context& ctx) {
  return make_echo<Q, C, path_choice::forced, echo::transport::nccl>(ctx);
}
std::unique_ptr<runner> make_nccl(bench_context& ctx) { return std::make_unique<nccl_runner>(ctx); }

struct variant_spec {
  const char* name;
  std::unique_ptr<runner> (*make)(bench_context&);
};

using za4 = echo::quant::zero_aware<4, 128>;
using za8 = echo::quant::zero_aware<8, 128>;
using q16 = echo::quant::none;
using c0 = echo::comp::none;
using ef16 = echo::comp::error_feedback<echo::bfloat16_t>;
using ef32 = echo::comp::error_feedback<float>;

// Index 0 must stay nccl (the baseline every speedup refers to). One line per variant.
const variant_spec k_variants[] = {
    {"nccl", make_nccl},
    {"echo_none16", make_echo<q16, c0>},
    {"echo_int4", make_echo<za4, c0>},
    {"echo_int4_ef", make_echo<za4, ef16>},
    {"echo_int4_ef32", make_echo<za4, ef32>},
    {"echo_int8", make_echo<za8, c0>},
    {"echo_int8_ef", make_echo<za8, ef16>},
    {"echo_dispatch", make_echo<za4, c0, path_choice::dispatch>},
    {"echo_nccl_int4", make_echo_nccl<za4, c0>},
    {"echo_nccl_int4_ef", make_echo_nccl<za4, ef16>},
    {"echo_nccl_int8", make_echo_nccl<za8, c0>},
    {"echo_int4_t512x1", make_echo_policy<512, 1, 4096>},
    {"echo_int4_t256x2", make_echo_policy<256, 2, 4096>},
};
constexpr size_t k_nccl = 0;
constexpr size_t k_num_variants = std::size(k_variants);

runner& bench_context::get(size_t v) {
  if (auto it = runners_.find(v); it != runners_.end()) return *it->second;
  if (auto it = failed_.find(v); it != failed_.end()) throw std::runtime_error(it->second);
  try {
    return *(runners_[v] = k_variants[v].make(*this));
  } catch (const std::exception& e) {
    runners_.erase(v);
    failed_[v] = std::string("construction failed: ") + e.what();
    throw std::runtime_error(failed_[v]);
  }
}

double bench_context::nccl_time(size_t bytes) {
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

// ---- results and the summary table -----------------------------------------------------------

struct cell {
  double t = NAN;        // seconds per call
  double speedup = NAN;  // t_nccl / t
  bool failed = false;
  std::string path;      // which path the call took (see runner::path)
};

std::unique_ptr<bench_context> g_ctx;
std::map<size_t, std::map<size_t, cell>> g_results;  // [variant][bytes]
std::FILE* g_text = stdout;                         // where the header and the summary go

void run_variant(benchmark::State& state, size_t v) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  const int P = g_ctx->size();
  for (auto _ : state) {
    try {
      runner& run = g_ctx->get(v);
      state.SetLabel(human_bytes(bytes) + " P=" + std::to_string(P) + " path=" + run.path(bytes));
      const bench_context::measurement m = g_ctx->measure(run, bytes);
      const double t = m.t;
      if (v == k_nccl) g_ctx->set_nccl_time(bytes, t);
      const double t_nccl = v == k_nccl ? t : g_ctx->nccl_time(bytes);
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
  const int P = g_ctx->size();
  cudaDeviceProp prop{};
  (void)cudaGetDeviceProperties(&prop, g_ctx->rank(0).device);
  std::fprintf(f, "\n== echo_bench summary%s%s%s: P=%d x %s, bf16 sum, out of place; cell = time_us (speedup vs nccl) ==\n",
               g_label.empty() ? "" : " [", g_label.c_str(), g_label.empty() ? "" : "]", P, prop.name);
  std::vector<size_t> cols;
  for (size_t v = 0; v < k_num_variants; ++v)
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
    size_t w = std::strlen(k_variants[v].name);
    for (const auto& [bytes, c] : g_results[v]) w = std::max(w, cell_text(c).size());
    width.push_back(w + 2);
  }
  std::fprintf(f, "%-8s", "size");
  for (size_t i = 0; i < cols.size(); ++i) std::fprintf(f, "%*s", static_cast<int>(width[i]), k_variants[cols[i]].name);
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
    if (varies || g_ctx->get(v).size_dispatch()) std::fprintf(f, "%s paths:%s\n", k_variants[v].name, paths.c_str());
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

int main(int argc, char** argv) {
  if (stdout_is_machine_format(argc, argv)) g_text = stderr;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

  if (const char* env = std::getenv("ECHO_BENCH_SIZES"); env && *env) {
    try {
      g_sizes = parse_sizes(env);
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
  if (P > echo::communicator::max_ranks) {
    std::fprintf(g_text, "echo_bench: %d GPUs visible; Echo's communicator takes at most %d, using the first %d\n", P,
                 echo::communicator::max_ranks, echo::communicator::max_ranks);
    P = echo::communicator::max_ranks;
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
    g_ctx = std::make_unique<bench_context>(devices);
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "echo_bench: setup failed: %s\n", ex.what());
    return 1;
  }

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
  for (int r = 0; r < P; ++r) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, r) == cudaSuccess)
      std::fprintf(g_text, "  rank %d: device %d %s (sm_%d%d, %d SMs)\n", r, r, prop.name, prop.major, prop.minor,
                   prop.multiProcessorCount);
  }
  std::fflush(g_text);

  for (size_t v = 0; v < k_num_variants; ++v) {
    auto* b = benchmark::RegisterBenchmark(k_variants[v].name, [v](benchmark::State& st) { run_variant(st, v); });
    for (size_t bytes : g_sizes) b->Arg(static_cast<int64_t>(bytes));
    b->ArgName("bytes")->UseManualTime()->Iterations(1)->Unit(benchmark::kMicrosecond);
  }

  benchmark::RunSpecifiedBenchmarks();
  print_summary(g_text);

  g_ctx.reset();
  benchmark::Shutdown();
  return 0;
}
