// One persistent host thread per rank, for the calls that each rank's own thread must issue
// (echo::transport::nccl runs NCCL group calls inside every call: one thread driving several
// ranks would deadlock).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace echo_bench {

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
  /// the pool is unusable: the caller must not return to code that destroys it; see
  /// bench_context::hang_handler).
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

}  // namespace echo_bench
