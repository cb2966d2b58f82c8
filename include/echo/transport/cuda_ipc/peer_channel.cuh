// The device handle of a cuda_ipc object: plain data the engine fills once (every rank's
// workspace as this device maps it, the spin limit, where a launch reports), and what the kernels
// do with it: open a launch, signal a peer, wait for one, give up, close the launch. The kernels
// never touch a flag word or the sync words themselves, so the waits' rules (spin limit, abort,
// signature) live here once, and another transport (NVSHMEM, a hierarchical one) is a handle with
// the same operations (in the manner of MSCCL++'s semaphore device handles).
//
// A launch opens the channel (open()): that reads the epoch and whether an earlier launch gave
// up, and gives a launch_channel bound to (epoch, call signature), whose signal() and wait() carry
// both. Waits end: reached (ok), the same epoch with another signature (mismatch), the abort word
// set by this rank or a peer (abort), or the spin limit (timeout); never a hang.
#pragma once

#include "../../comp/compensator.cuh"
#include "../../error.cuh"
#include "flag.cuh"

namespace echo::transport::cuda_ipc {

#if ECHO_HAS_CUDA

/// What a launch learned when it opened the channel.
struct launch_frame {
  uint64_t epoch;
  bool active;    ///< the call continues its chain
  bool poisoned;  ///< an earlier launch (or a peer) gave up: do nothing
};

struct peer_channel {
  unsigned char* local;        ///< this rank's workspace (sync words first: sync_words)
  unsigned char* const* peer;  ///< device array: every rank's workspace, as this device maps it
  int rank;
  int ranks;
  uint64_t spin_limit_ns;
  int* status;                 ///< host-mapped: a launch that gives up writes its echo::status there

  __device__ __forceinline__ uint32_t* sync() const { return reinterpret_cast<uint32_t*>(local); }

  /// Block prologue (every thread calls it; it synchronises the block). A launch on a rank that
  /// an earlier launch (or a peer) aborted reports why and leaves its chain fresh. state: the
  /// chain's memory (header first) or null; chain_key: comp::state_header::key of the call.
  __device__ __forceinline__ launch_frame open(unsigned char* state, uint64_t chain_key) const;
  /// The same for a launch without chain state.
  __device__ __forceinline__ launch_frame open() const { return open(nullptr, 0); }

  /// Block epilogue (every thread calls it): the grid's last block advances the epoch and, with
  /// state, writes the chain's tag, or a fresh tag where any rank gave up (its state is partial).
  __device__ __forceinline__ void close(uint64_t epoch, unsigned char* state = nullptr, uint64_t tag = 0) const;

  /// A barrier of this rank's grid (every thread of every block calls it; the grid is resident,
  /// as every cuda_ipc grid is): after it, every block sees what every block wrote before it.
  /// False where the launch gave up (here or on a peer) or a block never arrived within the spin
  /// limit (then this rank gives up with status::timeout).
  __device__ __forceinline__ bool grid_sync() const;

  /// Stop this rank's launch and tell the host (and, for a mismatch or a timeout, the peers: they
  /// would otherwise wait for their own spin limits). The first reason recorded wins. One thread.
  __device__ __forceinline__ void give_up(wait_result why) const;
};

/// The channel within one launch: the epoch and the call signature bound.
class launch_channel {
 public:
  __device__ __forceinline__ launch_channel(const peer_channel& c, uint64_t epoch, uint32_t sig)
      : c_(c), epoch_(epoch), sig_(sig), stamp_(flag_stamp(epoch, sig)) {}

  /// Publish the flag at byte `flag` of peer j's workspace (one thread; the data it covers was
  /// stored before, by this thread or, after a __syncwarp() / __syncthreads(), by its group).
  __device__ __forceinline__ void signal(int j, size_t flag) const {
    flag_publish(reinterpret_cast<uint64_t*>(c_.peer[j] + flag), epoch_, stamp_);
  }
  /// One thread waits for the flag at byte `flag` of this rank's workspace.
  __device__ __forceinline__ wait_result wait(size_t flag) const {
    return wait_flag(reinterpret_cast<const uint64_t*>(c_.local + flag), epoch_, sig_, c_.sync() + sync_words::abort,
                     c_.spin_limit_ns);
  }
  /// Lane 0 waits, the warp learns the outcome; the __syncwarp() extends lane 0's acquire to the
  /// warp before any lane reads the data.
  __device__ __forceinline__ wait_result warp_wait(size_t flag, int lane) const {
    int r = 0;
    if (lane == 0) r = static_cast<int>(wait(flag));
    r = __shfl_sync(0xffffffffu, r, 0);
    __syncwarp();
    return static_cast<wait_result>(r);
  }
  __device__ __forceinline__ void give_up(wait_result why) const { c_.give_up(why); }
  __device__ __forceinline__ uint64_t epoch() const { return epoch_; }

 private:
  peer_channel c_;
  uint64_t epoch_;
  uint32_t sig_;
  uint64_t stamp_;
};

__device__ __forceinline__ launch_frame peer_channel::open(unsigned char* state, uint64_t chain_key) const {
  __shared__ launch_frame f;
  if (threadIdx.x == 0) {
    f.epoch = *reinterpret_cast<volatile uint64_t*>(sync() + sync_words::epoch) + 1;
    const uint32_t abort = load_relaxed_sys(sync() + sync_words::abort);
    f.poisoned = abort != 0;
    if (f.poisoned && blockIdx.x == 0) {
      *reinterpret_cast<volatile int*>(status) = static_cast<int>(abort);
      __threadfence_system();
    }
    // A call that gave up on some rank may have written part of its chain's state in earlier
    // launches (rounds) or blocks, and its last launch, which would write the tag, does not run:
    // the chain restarts fresh rather than continue half-written (a rebuilt object may reuse it).
    if (f.poisoned && state) reinterpret_cast<volatile comp::state_header*>(state)->tag = 0;
    f.active = state && comp::state_header::continues(
                            reinterpret_cast<const volatile comp::state_header*>(state)->tag, chain_key);
  }
  __syncthreads();
  return f;
}

__device__ __forceinline__ void peer_channel::close(uint64_t epoch, unsigned char* state, uint64_t tag) const {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(sync() + sync_words::done, 1u) == gridDim.x - 1) {
      sync()[sync_words::done] = 0;
      const bool failed = load_relaxed_sys(sync() + sync_words::abort) != 0;
      if (state) reinterpret_cast<volatile comp::state_header*>(state)->tag = failed ? 0 : tag;
      *reinterpret_cast<volatile uint64_t*>(sync() + sync_words::epoch) = epoch;
    }
  }
}

__device__ __forceinline__ bool peer_channel::grid_sync() const {
  __shared__ int ok;
  __syncthreads();
  if (threadIdx.x == 0) {
    cuda::atomic_ref<uint32_t, cuda::thread_scope_device> arrived(sync()[sync_words::arrived]);
    cuda::atomic_ref<uint32_t, cuda::thread_scope_device> released(sync()[sync_words::released]);
    const uint32_t generation = released.load(cuda::memory_order_relaxed);
    __threadfence();
    bool passed = true;
    if (arrived.fetch_add(1u, cuda::memory_order_acq_rel) == gridDim.x - 1) {
      arrived.store(0u, cuda::memory_order_relaxed);
      released.fetch_add(1u, cuda::memory_order_release);
    } else {
      const uint64_t start = global_timer_ns();
      while (released.load(cuda::memory_order_acquire) == generation) {
        if (load_relaxed_sys(sync() + sync_words::abort) != 0) {
          passed = false;
          break;
        }
        if (global_timer_ns() - start > spin_limit_ns) {
          give_up(wait_result::timeout);
          passed = false;
          break;
        }
      }
    }
    __threadfence();
    ok = passed && load_relaxed_sys(sync() + sync_words::abort) == 0;
  }
  __syncthreads();
  return ok != 0;
}

__device__ __forceinline__ void peer_channel::give_up(wait_result why) const {
  uint32_t code = why == wait_result::mismatch ? static_cast<uint32_t>(status::mismatch)
                                               : static_cast<uint32_t>(status::timeout);
  if (why == wait_result::abort) {
    code = load_relaxed_sys(sync() + sync_words::abort);
  } else {
    const uint32_t prev = atomicCAS_system(sync() + sync_words::abort, 0u, code);
    if (prev != 0) {
      code = prev;
    } else {
      for (int j = 0; j < ranks; ++j)
        if (j != rank) atomicCAS_system(reinterpret_cast<uint32_t*>(peer[j]) + sync_words::abort, 0u, code);
    }
  }
  *reinterpret_cast<volatile int*>(status) = static_cast<int>(code);
  __threadfence_system();
}

#endif

}  // namespace echo::transport::cuda_ipc
