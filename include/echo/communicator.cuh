// echo::communicator: who the ranks are and how they exchange setup bytes.
//
// Three ways to build one:
//  - communicator::local(devices): one process drives all its GPUs (as ncclCommInitAll does).
//    Setup of Echo objects is collective: construct one per rank, from one thread per rank
//    (echo::for_each_rank does that); the hot-path calls may then come from any one thread.
//  - communicator::from_nccl(comm): one process per GPU, bootstrapped through an existing
//    ncclComm_t (its all-gather carries the setup bytes).
//  - communicator(rank, size, device, all_gather): a user callback, e.g. over torch.distributed.
#pragma once

#include "detail/cuda_check.cuh"
#include "detail/device_guard.cuh"
#include "error.cuh"

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace echo {

/// all_gather(send, recv, bytes): every rank contributes `bytes` bytes; recv receives size()
/// blocks in rank order. Must be collective and blocking.
using all_gather_fn = std::function<void(const void* send, void* recv, size_t bytes)>;

namespace detail {

/// In-process rendezvous for communicator::local(): an all-gather among threads.
class local_rendezvous {
 public:
  explicit local_rendezvous(int size, std::chrono::milliseconds timeout = std::chrono::seconds(120))
      : size_(size), slots_(static_cast<size_t>(size)), timeout_(timeout) {}

  void all_gather(int rank, const void* send, void* recv, size_t bytes) {
    std::unique_lock<std::mutex> lk(m_);
    // Wait until the previous round has been fully read.
    if (!cv_.wait_for(lk, timeout_, [&] { return !reading_; }))
      throw ::echo::error("echo::communicator::all_gather", "peers did not arrive (previous round stuck)", __FILE__, __LINE__);
    const uint64_t gen = generation_;
    slots_[static_cast<size_t>(rank)].assign(static_cast<const char*>(send), static_cast<const char*>(send) + bytes);
    if (++arrived_ == size_) {
      reading_ = true;
      left_ = size_;
      ++generation_;
      cv_.notify_all();
    } else if (!cv_.wait_for(lk, timeout_, [&] { return generation_ != gen; })) {
      // Withdraw from the round: a later round must not count this arrival or read these bytes
      // (it did both, and read a rank's bytes of the round it gave up on as the next round's).
      --arrived_;
      slots_[static_cast<size_t>(rank)].clear();
      throw ::echo::error("echo::communicator::all_gather",
                          "not every rank of the local communicator arrived within " +
                              std::to_string(timeout_.count() / 1000.0) +
                              " s (construct Echo objects from one thread per rank, e.g. with echo::for_each_rank)",
                          __FILE__, __LINE__);
    }
    for (int r = 0; r < size_; ++r) {
      const auto& s = slots_[static_cast<size_t>(r)];
      if (s.size() != bytes)
        throw ::echo::error("echo::communicator::all_gather", "ranks passed different sizes", __FILE__, __LINE__);
      std::memcpy(static_cast<char*>(recv) + static_cast<size_t>(r) * bytes, s.data(), bytes);
    }
    if (--left_ == 0) {
      arrived_ = 0;
      reading_ = false;
      cv_.notify_all();
    }
  }

 private:
  int size_;
  std::vector<std::vector<char>> slots_;
  std::mutex m_;
  std::condition_variable cv_;
  int arrived_ = 0, left_ = 0;
  bool reading_ = false;
  uint64_t generation_ = 0;
  std::chrono::milliseconds timeout_;
};

/// communicator::from_nccl's all-gather: a device buffer and a stream made once, so that an
/// exchange allocates nothing (payloads up to max_bytes; Echo's are a few hundred bytes).
class nccl_staging {
 public:
  static constexpr size_t max_bytes = 4096;

  nccl_staging(int device, int size) : device_(device), size_(size) {
    device_guard g(device);
    ECHO_CUDA_TRY(cudaMalloc(&buf_, max_bytes * (static_cast<size_t>(size) + 1)));
    const cudaError_t e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
      (void)cudaFree(buf_);
      ::echo::detail::throw_cuda(e, "cudaStreamCreateWithFlags", __FILE__, __LINE__);
    }
  }
  nccl_staging(const nccl_staging&) = delete;
  nccl_staging& operator=(const nccl_staging&) = delete;
  ~nccl_staging() {
    device_guard g(device_);
    (void)cudaStreamDestroy(stream_);
    (void)cudaFree(buf_);
    (void)cudaGetLastError();
  }

  void all_gather(ncclComm_t comm, const void* send, void* recv, size_t bytes) {
    ECHO_REQUIRE(bytes <= max_bytes, "echo::communicator::from_nccl (all_gather)",
                 "setup payload of " + std::to_string(bytes) + " bytes above " + std::to_string(max_bytes));
    device_guard g(device_);
    ECHO_CUDA_TRY(cudaMemcpyAsync(buf_, send, bytes, cudaMemcpyHostToDevice, stream_));
    ECHO_NCCL_TRY(ncclAllGather(buf_, buf_ + bytes, bytes, ncclChar, comm, stream_));
    ECHO_CUDA_TRY(cudaMemcpyAsync(recv, buf_ + bytes, bytes * static_cast<size_t>(size_), cudaMemcpyDeviceToHost, stream_));
    ECHO_CUDA_TRY(cudaStreamSynchronize(stream_));
  }

 private:
  int device_, size_;
  char* buf_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

}  // namespace detail

class communicator {
 public:
  /// Copies share the one callback object: a callback that keeps state (a round counter, say)
  /// sees every all-gather of every copy, in order.
  communicator(int rank, int size, int device, all_gather_fn all_gather, ncclComm_t nccl = nullptr)
      : rank_(rank), size_(size), device_(device), all_gather_(std::make_shared<all_gather_fn>(std::move(all_gather))),
        nccl_(nccl) {
    // No upper limit here: transport::nccl spans nodes; a transport that has a limit checks it.
    ECHO_REQUIRE(size >= 1, "echo::communicator", "size must be >= 1, got " + std::to_string(size));
    ECHO_REQUIRE(rank >= 0 && rank < size, "echo::communicator", "rank out of range");
    ECHO_REQUIRE(static_cast<bool>(*all_gather_), "echo::communicator", "an all_gather callback is required");
  }

  /// One communicator per device, all in this process. With with_nccl, each also holds an
  /// ncclComm_t from ncclCommInitAll (used by the small-message fallback and by benchmarks).
  static std::vector<communicator> local(const std::vector<int>& devices, bool with_nccl = true) {
    const int P = static_cast<int>(devices.size());
    ECHO_REQUIRE(P >= 1, "echo::communicator::local", "at least one device");
    std::vector<ncclComm_t> nccl(static_cast<size_t>(P), nullptr);
    if (with_nccl) ECHO_NCCL_TRY(ncclCommInitAll(nccl.data(), P, devices.data()));
    auto rv = std::make_shared<detail::local_rendezvous>(P);
    std::vector<communicator> out;
    for (int r = 0; r < P; ++r)
      out.emplace_back(r, P, devices[static_cast<size_t>(r)],
                       [rv, r](const void* s, void* d, size_t b) { rv->all_gather(r, s, d, b); },
                       nccl[static_cast<size_t>(r)]);
    for (auto& c : out) c.owns_nccl_ = with_nccl;
    return out;
  }

  /// One process per GPU: bootstrap through an existing NCCL communicator (not owned).
  /// The current CUDA device must be the one this rank uses.
  static communicator from_nccl(ncclComm_t comm) {
    int rank = 0, size = 0, device = 0;
    ECHO_NCCL_TRY(ncclCommUserRank(comm, &rank));
    ECHO_NCCL_TRY(ncclCommCount(comm, &size));
    ECHO_NCCL_TRY(ncclCommCuDevice(comm, &device));
    // The staging memory and stream are made here, once: an all-gather that allocated could be
    // refused on one rank only (under the memory pressure that fails a constructor's own step)
    // and leave its peers in NCCL, where a collective constructor's failure bit never reaches them.
    auto stage = std::make_shared<detail::nccl_staging>(device, size);
    auto ag = [comm, stage](const void* s, void* d, size_t b) { stage->all_gather(comm, s, d, b); };
    return communicator(rank, size, device, ag, comm);
  }

  communicator(const communicator&) = default;
  communicator& operator=(const communicator&) = default;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int device() const { return device_; }
  /// The NCCL communicator, if any (not owned unless made by local()).
  ncclComm_t nccl() const { return nccl_; }

  void all_gather(const void* send, void* recv, size_t bytes) const { (*all_gather_)(send, recv, bytes); }
  template <class T>
  std::vector<T> all_gather(const T& mine) const {
    std::vector<T> all(static_cast<size_t>(size_));
    all_gather(&mine, all.data(), sizeof(T));
    return all;
  }
  void barrier() const { (void)all_gather(rank_); }

  /// Destroy NCCL communicators made by local() (call once, after all users are gone).
  static void destroy(std::vector<communicator>& comms) {
    for (auto& c : comms)
      if (c.owns_nccl_ && c.nccl_) {
        ncclCommDestroy(c.nccl_);
        c.nccl_ = nullptr;
      }
  }

 private:
  int rank_, size_, device_;
  std::shared_ptr<all_gather_fn> all_gather_;
  ncclComm_t nccl_ = nullptr;
  bool owns_nccl_ = false;
};

/// Run f(comm) for every rank, one thread each, and rethrow the first exception. Use it to
/// construct Echo objects collectively in single-process mode.
template <class F>
void for_each_rank(const std::vector<communicator>& comms, F&& f) {
  std::vector<std::exception_ptr> errs(comms.size());
  std::vector<std::thread> ts;
  for (size_t r = 0; r < comms.size(); ++r)
    ts.emplace_back([&, r] {
      try {
        ECHO_CUDA_TRY(cudaSetDevice(comms[r].device()));
        f(comms[r]);
      } catch (...) {
        errs[r] = std::current_exception();
      }
    });
  for (auto& t : ts) t.join();
  for (auto& e : errs)
    if (e) std::rethrow_exception(e);
}

}  // namespace echo
