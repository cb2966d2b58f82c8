// The benchmark harness: P ranks in one process (one per GPU), each with a stream, a pair of
// events and an input and an output buffer; the variant-independent part of a measurement
// (inputs, timing a batch of calls, the median of batches). What is measured is a `runner`.
//
// Timing: one call = every rank launches on its own non-blocking stream. Single-thread runners
// (NCCL, transport::cuda_ipc) issue every rank's launches from the calling thread; runners that
// need a thread per rank (transport::nccl issues ncclSend/ncclRecv group calls inside each call,
// which one thread driving several ranks cannot do) get one persistent worker per rank
// (rank_pool): the calling thread hands every worker "run k calls" and waits for all of them.
// Either way a batch of calls is bracketed by CUDA events on every rank's stream; a batch's time
// is the largest elapsed time over the ranks. A threaded batch starts with one untimed call, so
// that the workers' wake-up skew is not timed. A threaded batch that does not drain within
// hang_seconds (a hung NCCL connection, or a rank that failed to launch while its peers wait for
// it inside NCCL) cannot be recovered in-process: the hang handler is called and must not return.
#pragma once

#include "inputs.cuh"
#include "rank_pool.hpp"

#include <echo/communicator.cuh>
#include <echo/transport/cuda_ipc/tag.cuh>
#include <echo/dtype.cuh>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

namespace echo_bench {

constexpr int k_max_ranks = echo::transport::cuda_ipc::max_ranks;  ///< the benchmarks run the ranks of one node

/// One rank's resources. `in` and `out` hold buffer_bytes each.
struct rank_res {
  int device = 0;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  void* in = nullptr;
  void* out = nullptr;
};

/// One configuration's objects on every rank; call() launches one all-reduce of n elements on
/// all ranks, from in to out, or in place on out.
class runner {
 public:
  virtual ~runner() = default;
  /// Launch one call on every rank (stream-ordered, no sync) from this one thread. Throws on a
  /// failed launch.
  virtual void call(size_t n, bool in_place) = 0;
  /// True when every rank's calls must be issued from that rank's own thread (transport::nccl):
  /// time_batch then runs call_rank(r, ...) on rank r's worker instead of call(...).
  virtual bool per_rank_threads() const { return false; }
  /// Launch one call on rank r only (its device is current). Throws on a failed launch.
  virtual void call_rank(int, size_t, bool);
  /// After the streams are synchronized: throw if any rank timed out.
  virtual void check() const {}
  /// Start every chain afresh (stream-ordered); nothing for runners without state.
  virtual void reset_state() {}
  /// The path a call of `bytes` takes ("nccl", "none", or the quantizer), for labels.
  virtual std::string path(size_t bytes) const = 0;
  /// True when the path depends on the size (echo::tuning::dispatch_table thresholds).
  virtual bool size_dispatch() const { return false; }
};

class bench_context {
 public:
  /// Called with what hung; must not return (the hung streams and threads cannot be destroyed).
  using hang_handler = void (*)(const std::string& what);

  /// Sets up every device: a stream, two events, two buffers of buffer_bytes (out zeroed), and
  /// the communicators (with_nccl: with NCCL communicators, comms()[r].nccl(); NCCL refuses
  /// two ranks on one GPU, so ranks that share a GPU need with_nccl = false).
  bench_context(const std::vector<int>& devices, size_t buffer_bytes, bool with_nccl = true);
  bench_context(const bench_context&) = delete;
  bench_context& operator=(const bench_context&) = delete;
  /// Destroy every runner made on this context first: their destructors use the devices.
  ~bench_context();

  int size() const { return static_cast<int>(ranks_.size()); }
  const rank_res& rank(int r) const { return ranks_[static_cast<size_t>(r)]; }
  const std::vector<echo::communicator>& comms() const { return comms_; }
  size_t buffer_bytes() const { return buffer_bytes_; }

  void set_hang_handler(hang_handler h) { on_hang_ = h; }
  double hang_seconds = 120.0;  ///< a threaded batch still running after this is a hang

  /// in[0, n) (or out[0, n)) of every rank = the N(0, 1) stream seed_of(r) rounded to T; then
  /// synchronizes.
  template <class T, class Seed>
  void fill(size_t n, Seed&& seed_of, bool into_out = false) {
    for (int r = 0; r < size(); ++r) {
      const rank_res& R = rank(r);
      ECHO_CUDA_TRY(cudaSetDevice(R.device));
      fill_normal(static_cast<T*>(into_out ? R.out : R.in), n, seed_of(r), R.stream);
    }
    sync_all();
  }

  void sync_all();

  /// Seconds per call of a batch of `calls` calls: the largest event time over the ranks.
  /// `settle`: a threaded batch starts behind one untimed call (false: exactly `calls` calls
  /// are made, as a checked call on a fresh chain or on in-place data needs).
  double time_batch(runner& run, size_t n, int calls, bool in_place = false, bool settle = true);

  /// Wait (polling, from this thread) until every rank's stream is idle; false after timeout_s.
  bool drain(double timeout_s);

 private:
  void time_batch_single(runner& run, size_t n, int calls, bool in_place);
  void time_batch_threaded(runner& run, size_t n, int calls, bool in_place, bool settle);

  std::vector<rank_res> ranks_;
  std::vector<echo::communicator> comms_;
  std::unique_ptr<rank_pool> pool_;  // made on the first per_rank_threads() batch
  size_t buffer_bytes_ = 0;
  hang_handler on_hang_ = nullptr;
};

}  // namespace echo_bench
