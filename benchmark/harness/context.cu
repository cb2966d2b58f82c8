#include "context.cuh"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <thread>

namespace echo_bench {

void runner::call_rank(int, size_t, bool) {
  throw std::logic_error("echo_bench: call_rank on a runner driven from one thread");
}

namespace {
[[noreturn]] void default_hang(const std::string& what) {
  std::fprintf(stderr, "echo_bench: FATAL: %s; ranks left waiting inside NCCL cannot be recovered in this process\n",
               what.c_str());
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(1);  // no destructors: they would wait on the hung streams and threads
}
}  // namespace

bench_context::bench_context(const std::vector<int>& devices, size_t buffer_bytes, bool with_nccl)
    : buffer_bytes_(buffer_bytes) {
  ranks_.resize(devices.size());
  for (size_t r = 0; r < devices.size(); ++r) {
    rank_res& R = ranks_[r];
    R.device = devices[r];
    ECHO_CUDA_TRY(cudaSetDevice(R.device));
    ECHO_CUDA_TRY(cudaStreamCreateWithFlags(&R.stream, cudaStreamNonBlocking));
    ECHO_CUDA_TRY(cudaEventCreate(&R.start));
    ECHO_CUDA_TRY(cudaEventCreate(&R.stop));
    ECHO_CUDA_TRY(cudaMalloc(&R.in, buffer_bytes));
    ECHO_CUDA_TRY(cudaMalloc(&R.out, buffer_bytes));
    ECHO_CUDA_TRY(cudaMemset(R.out, 0, buffer_bytes));
  }
  comms_ = echo::communicator::local(devices, with_nccl);  // with_nccl: also ncclCommInitAll
}

bench_context::~bench_context() {
  pool_.reset();  // idle workers (a hung one never gets here: the hang handler exits)
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

void bench_context::sync_all() {
  for (const rank_res& R : ranks_) {
    ECHO_CUDA_TRY(cudaSetDevice(R.device));
    ECHO_CUDA_TRY(cudaStreamSynchronize(R.stream));
  }
}

double bench_context::time_batch(runner& run, size_t n, int calls, bool in_place, bool settle) {
  if (run.per_rank_threads()) {
    time_batch_threaded(run, n, calls, in_place, settle);
  } else {
    time_batch_single(run, n, calls, in_place);
  }
  run.check();
  float worst_ms = 0.0f;
  for (const rank_res& R : ranks_) {
    float ms = 0.0f;
    ECHO_CUDA_TRY(cudaEventElapsedTime(&ms, R.start, R.stop));
    worst_ms = std::max(worst_ms, ms);
  }
  return 1e-3 * static_cast<double>(worst_ms) / calls;
}

/// One thread issues every rank's launches; returns with the streams synchronized.
void bench_context::time_batch_single(runner& run, size_t n, int calls, bool in_place) {
  for (const rank_res& R : ranks_) {
    ECHO_CUDA_TRY(cudaSetDevice(R.device));
    ECHO_CUDA_TRY(cudaEventRecord(R.start, R.stream));
  }
  for (int i = 0; i < calls; ++i) {
    try {
      run.call(n, in_place);
    } catch (...) {
      // Let whatever was launched drain (a rank whose peer never launched times out within the
      // spin limit) so the next measurement starts from idle streams.
      for (const rank_res& R : ranks_) {
        (void)cudaSetDevice(R.device);
        (void)cudaStreamSynchronize(R.stream);
      }
      throw;
    }
  }
  for (const rank_res& R : ranks_) {
    ECHO_CUDA_TRY(cudaSetDevice(R.device));
    ECHO_CUDA_TRY(cudaEventRecord(R.stop, R.stream));
  }
  sync_all();
}

/// Every rank's worker issues one untimed call (settle), records its start event, issues `calls`
/// calls and records its stop event; returns with the streams drained. A rank that failed to launch leaves its peers waiting inside
/// NCCL: if they do not drain, that is fatal (the hang handler).
void bench_context::time_batch_threaded(runner& run, size_t n, int calls, bool in_place, bool settle) {
  const hang_handler hang = on_hang_ ? on_hang_ : default_hang;
  if (!pool_) {
    std::vector<int> devices;
    for (const rank_res& R : ranks_) devices.push_back(R.device);
    pool_ = std::make_unique<rank_pool>(devices);
  }
  const auto job = [&](int r) {
    const rank_res& R = rank(r);
    ECHO_CUDA_TRY(cudaSetDevice(R.device));
    // One untimed call first, so every rank's start event fires when all ranks have arrived: the
    // workers wake from one notify at different times, and the earliest rank's batch would
    // otherwise include its wait for the latest (the single-thread path launches every rank
    // within microseconds). docs/benchmarks.md measures what it changed.
    if (settle) run.call_rank(r, n, in_place);
    ECHO_CUDA_TRY(cudaEventRecord(R.start, R.stream));
    for (int i = 0; i < calls; ++i) run.call_rank(r, n, in_place);
    ECHO_CUDA_TRY(cudaEventRecord(R.stop, R.stream));
  };
  std::vector<std::exception_ptr> errors;
  if (!pool_->run(job, hang_seconds, errors)) {
    hang("a worker thread is still issuing its calls after " + std::to_string(static_cast<int>(hang_seconds)) +
         " s (blocked inside NCCL?)");
    std::abort();  // a hang handler must not return
  }
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
    if (!drain(10.0)) {
      hang(failed + "; the other ranks did not drain within 10 s");
      std::abort();
    }
    throw std::runtime_error(failed);
  }
  if (!drain(hang_seconds)) {
    hang("the streams did not drain within " + std::to_string(static_cast<int>(hang_seconds)) + " s");
    std::abort();
  }
}

bool bench_context::drain(double timeout_s) {
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t r = 0; r < ranks_.size();) {
    const cudaError_t e = cudaStreamQuery(ranks_[r].stream);
    if (e == cudaSuccess) {
      ++r;
      continue;
    }
    if (e != cudaErrorNotReady) ECHO_CUDA_TRY(e);
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > timeout_s) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  return true;
}

}  // namespace echo_bench
