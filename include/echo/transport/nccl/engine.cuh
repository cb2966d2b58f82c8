// transport::nccl's engine: the Echo pipeline over ncclSend / ncclRecv, for any P and any number of nodes.
#pragma once

#include "../../collective/config.cuh"
#include "../../collective/state_kernels.cuh"
#include "../../collective/tile_config.cuh"
#include "../../communicator.cuh"
#include "../../detail/blocking_copy.cuh"
#include "../../detail/ceil_div.cuh"
#include "../../detail/collective_setup.cuh"
#include "../../detail/cuda_check.cuh"
#include "../../detail/dependent_launch.cuh"
#include "../../detail/device_guard.cuh"
#include "../../detail/mapped_status.cuh"
#include "../../detail/partition.cuh"
#include "../../detail/signature.cuh"
#include "../../epilogue/rows.cuh"
#include "../../options.cuh"
#include "../../tuning/dispatch_table.cuh"
#include "../../tuning/pipeline_policy.cuh"
#include "staged_kernels.cuh"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace echo::transport::nccl {

inline constexpr const char* name = "nccl";

/// Packets move as ncclSend / ncclRecv of whole chunks inside group calls, on a side stream of
/// the engine's own; the quantize / reduce / dequantize kernels run on the caller's stream. Two
/// buffer sets let chunk k+1 be quantized while chunk k is on the wire:
///   caller stream: push(0) push(1) reduce(0) push(2) reduce(1) gather(0) push(3) ...
///   side stream:   exchange(0) exchange(1) all-gather(0) exchange(2) all-gather(1) ...
/// every arrow between them an event. The side stream forks from the caller's stream at the
/// start of a call and joins it at the end, so a call is stream-ordered and CUDA-graph
/// capturable wherever NCCL's own operations are. Each rank must be driven by its own thread or
/// process: NCCL needs group calls across ranks when one thread drives several GPUs, which would
/// reorder our kernels. NCCL refuses two ranks on one GPU, so this transport does too.
template <class Config>
class engine {
  using Quant = typename Config::quant;
  using Comp = typename Config::comp;
  /// The staged kernels never wait on a peer, so unlike cuda_ipc's they need not be co-resident:
  /// they run at 1024 threads a SM at least (4 blocks of the default's 256), which the policy
  /// itself cannot ask of a spinning kernel. Measured on H200 (docs/benchmarks.md): push and
  /// reduce 14-24 % faster than at 2 blocks, 4-bit + error feedback 1.10x -> 1.22x NCCL at
  /// 256 MiB. Results do not depend on it (a policy decides who computes what, not how).
  using Given = typename Config::policy;
  static constexpr int staged_blocks = std::max(Given::blocks_per_sm, 1024 / Given::threads);
  using Policy = tuning::pipeline_policy<Given::threads, staged_blocks, Given::flag_elems, Given::lane_values, 0>;

 public:
  static constexpr int sets = 2;

  /// Local (not symmetric) buffers: per set P send, P recv, 1 reduced, P gathered slots.
  /// Collective: throws on every rank or on none (detail/collective_setup.cuh).
  engine(const communicator& comm, size_t max_elements, const all_reduce_options& opt) : comm_(comm) {
    echo::detail::device_guard guard(comm.device());
    try {
      build(max_elements, opt);
    } catch (...) {
      release();  // the destructor does not run for a constructor that throws
      throw;
    }
  }
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;
  ~engine() {
    echo::detail::device_guard guard(comm_.device());
    release();
  }

  size_t workspace_bytes() const { return bytes_; }
  int device_status() const { return status_.read(); }
  tuning::dispatch_entry dispatch(int ranks) const { return tuning::lookup_dispatch(gpu_name_.c_str(), ranks, name, link_); }
  const char* last_error() const { return error_; }

  /// The deferred half of a state_update::deferred call through Q (collective/state_kernels.cuh):
  /// this rank's state only, no peer. A failed launch leaves the object usable.
  template <class Q, class T>
  status run_update(const T* in, size_t n, unsigned char* state, cudaStream_t stream) {
    return collective::run_update<Config, Q>(in, n, state, comm_.rank(), comm_.size(), sms_, stream, error_);
  }

  /// A call through quantizer Q: chunks of whole sub-tiles through the staged kernels.
  template <class Q, class T>
  status run(const collective::call_args<T>& c, cudaStream_t stream) {
    using Cfg = collective::tile_config<Q, T, Comp, Policy>;
    const int P = comm_.size(), me = comm_.rank();
    const size_t slot_bytes = bytes_ / (sets * slots());
    const size_t capacity = (slot_bytes - slot_header::bytes) / Cfg::sub_bytes;  // sub-tiles a slot holds
    if (capacity == 0) {
      error_ = "the workspace holds no sub-tile: raise workspace_bytes";
      return status::invalid_argument;
    }
    const echo::detail::partition part{c.n, echo::detail::granule_of<Q>(), P};
    const size_t subs0 = echo::detail::ceil_div(part.size(0), Cfg::sub_elems);
    // Chunks as large as a slot holds (a segment that fits one goes in one). Large chunks win
    // on NVLink, where each ncclSend/ncclRecv group costs more than a few MiB take on the
    // wire: at least eight chunks ran 1.03x NCCL at 256 MiB (2026-11-30) against 1.17x with
    // slot-sized ones (2026-11-29), and at least two 0.75x at 16 MiB against 0.88x with one.
    const size_t chunk_subs = std::min(capacity, std::max<size_t>(1, subs0));
    chunk_params base{};
    base.n = c.n;
    base.chain_key = comp::state_header::key(c.n, Cfg::domain);
    base.keep_own = !c.closes;
    base.element_type = static_cast<unsigned>(element_traits<T>::tag);
    base.granule = echo::detail::granule_of<Q>();
    base.rank = me;
    base.ranks = P;
    base.sig = echo::detail::signature().add(c.sig).add(chunk_subs).add(3).value();
    base.chunk_len = chunk_subs * Cfg::sub_elems;
    base.slot_bytes = slot_bytes;
    base.state = c.state;
    base.status = status_.device();
    const size_t chunks = echo::detail::ceil_div(part.size(0), base.chunk_len);
    const int grid = std::max(1, sms_ * Policy::blocks_per_sm);
    auto set = [&](size_t k) {
      chunk_params s = base;
      unsigned char* b = base_ + (k % sets) * slots() * slot_bytes;
      s.chunk = static_cast<uint32_t>(k);
      s.chunk_offset = k * base.chunk_len;
      s.send = b;
      s.recv = b + P * slot_bytes;
      s.reduced = b + 2 * P * slot_bytes;
      s.gathered = b + (2 * P + 1) * slot_bytes;
      return s;
    };
    // bytes of segment j's share of chunk k: the header and whole sub-tiles
    auto chunk_bytes = [&](size_t k, int j) -> size_t {
      const size_t len = part.size(j), off = k * base.chunk_len;
      if (off >= len) return 0;
      const size_t l = std::min(len - off, base.chunk_len);
      return slot_header::bytes + echo::detail::ceil_div(l, Cfg::sub_elems) * Cfg::sub_bytes;
    };
    events& ev = events_;
    // A CUDA call's own status (cuda_bad), never cudaGetLastError(): an error the caller's
    // thread left behind must not fail a call that ran, nor skip this rank's NCCL sends.
    bool cuda_bad = false;
    auto ok = [&](cudaError_t e) {
      cuda_bad = cuda_bad || e != cudaSuccess;
      return e == cudaSuccess;
    };
    auto launch = [&](auto kernel, const chunk_params& s, auto... args) {
      return ok(echo::detail::launch_dependent(kernel, grid, Cfg::threads, stream, false, s, args...));
    };
    auto nok = [](ncclResult_t r) { return r == ncclSuccess; };
    ncclComm_t nc = comm_.nccl();
    bool good = ok(cudaEventRecord(ev.fork, stream)) && ok(cudaStreamWaitEvent(side_, ev.fork, 0));
    auto push = [&](size_t k) {
      const auto s = set(k);
      const bool launched = launch(push_kernel<Cfg>, s, c.in, c.mode == state_update::fused && !c.closes);
      good = good && launched && ok(cudaEventRecord(ev.pushed[k % 2], stream)) &&
             ok(cudaStreamWaitEvent(side_, ev.pushed[k % 2], 0));
      if (!good) return;
      good = nok(ncclGroupStart());
      for (int d = 1; d < P && good; ++d) {
        const int to = (me + d) % P, from = (me - d + P) % P;
        if (const size_t b = chunk_bytes(k, to)) good = nok(ncclSend(s.send + to * slot_bytes, b, ncclUint8, to, nc, side_));
        if (const size_t b = chunk_bytes(k, me); good && b)
          good = nok(ncclRecv(s.recv + from * slot_bytes, b, ncclUint8, from, nc, side_));
      }
      good = nok(ncclGroupEnd()) && good;
      good = good && ok(cudaEventRecord(ev.exchanged[k % 2], side_));
    };
    auto reduce = [&](size_t k) {
      const auto s = set(k);
      good = good && ok(cudaStreamWaitEvent(stream, ev.exchanged[k % 2], 0));
      if (!good) return;
      good = launch(reduce_kernel<Cfg>, s, c.in, c.out) && ok(cudaEventRecord(ev.reduced[k % 2], stream)) &&
             ok(cudaStreamWaitEvent(side_, ev.reduced[k % 2], 0));
      if (!good) return;
      good = nok(ncclGroupStart());
      for (int d = 1; d < P && good; ++d) {
        const int to = (me + d) % P, from = (me - d + P) % P;
        if (const size_t b = chunk_bytes(k, me)) good = nok(ncclSend(s.reduced, b, ncclUint8, to, nc, side_));
        if (const size_t b = chunk_bytes(k, from); good && b)
          good = nok(ncclRecv(s.gathered + from * slot_bytes, b, ncclUint8, from, nc, side_));
      }
      good = nok(ncclGroupEnd()) && good;
      good = good && ok(cudaEventRecord(ev.gathered[k % 2], side_));
    };
    auto gather = [&](size_t k) {
      good = good && ok(cudaStreamWaitEvent(stream, ev.gathered[k % 2], 0));
      if (!good) return;
      auto s = set(k);
      s.end_chain = k + 1 < chunks                   ? chain_end::none  // the last launch writes the tag
                    : c.closes                      ? chain_end::closed
                    : c.mode == state_update::fused ? chain_end::fused
                                                    : chain_end::deferred;
      good = launch(gather_kernel<Cfg>, s, c.out);
    };
    // Software pipeline over chunks (see the class comment for the order and why two sets do).
    for (size_t k = 0; k < chunks + 2 && good; ++k) {
      if (k < chunks) push(k);
      if (k >= 1 && k - 1 < chunks) reduce(k - 1);
      if (k >= 2) gather(k - 2);
    }
    good = good && ok(cudaEventRecord(ev.join, side_)) && ok(cudaStreamWaitEvent(stream, ev.join, 0));
    good = good && ok(run_epilogue(c, stream));
    return finish(good, cuda_bad);
  }

  /// A call that closes its chain, through Q (the object's closing quantizer).
  template <class Q, class T>
  status run_closing(const collective::call_args<T>& c, cudaStream_t stream) {
    return run<Q>(c, stream);
  }

  /// Below the dispatch size: NCCL's own all-reduce (exact, not quantized; bit-identical on
  /// every rank). It injects no quantization error, so the chain passes through it untouched:
  /// its stored errors wait for the chain's next call of the same n. (Resetting the chain's tag
  /// instead, as this engine did until 2026-11-30, cost a stream operation of 3-5 us a call,
  /// where the whole call takes 9-35 us; docs/benchmarks.md.)
  template <class T>
  status run_unquantized(const collective::call_args<T>& c, cudaStream_t stream) {
    const ncclDataType_t type = std::is_same<T, float>::value       ? ncclFloat32
                                : std::is_same<T, half_t>::value     ? ncclFloat16
                                                                     : ncclBfloat16;
    if (ncclAllReduce(c.in, c.out, c.n, type, ncclSum, comm_.nccl(), stream) != ncclSuccess) return finish(false, false);
    return finish(run_epilogue(c, stream) == cudaSuccess, true);
  }

 private:
  static constexpr size_t min_slot_bytes = size_t(64) << 10;

  void build(size_t max_elements, const all_reduce_options& opt) {
    const communicator& comm = comm_;
    const char* call = "echo::all_reduce (nccl engine)";
    echo::detail::collective_setup setup(comm, call);
    setup.local([&] {
      status_.allocate();
      collective::preload_update_kernels<Config>();
      ECHO_REQUIRE(comm.nccl() != nullptr, call,
                   "the communicator holds no ncclComm_t (use communicator::from_nccl, or local(devices, true))");
      cudaDeviceProp prop{};
      ECHO_CUDA_TRY(cudaGetDeviceProperties(&prop, comm.device()));
      gpu_name_ = prop.name;
      sms_ = prop.multiProcessorCount;
    });
    link_ = link_class(setup);  // an exchange: reports the steps above
    if (comm.size() == 1) return;
    setup.local([&] {
      // A segment's packets at the widest (fp32 through quant::none: 4 bytes a value), capped.
      const size_t seg = echo::detail::partition{max_elements, 32, comm.size()}.size(0) + 2048;
      const size_t slot = std::max(min_slot_bytes, std::min(seg * 4, opt.workspace_bytes / (sets * slots()))) & ~size_t(255);
      bytes_ = sets * slots() * (slot + slot_header::bytes);
      ECHO_CUDA_TRY(cudaMalloc(&base_, bytes_));
      ECHO_CUDA_TRY(echo::detail::write_device_now(base_, nullptr, bytes_));  // done before the first call
      ECHO_CUDA_TRY(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
      for (cudaEvent_t& e : events_.all()) ECHO_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    });
    // Before the first call's NCCL operations: a rank that failed here would leave its peers
    // waiting in NCCL, which has no timeout.
    setup.agree();
  }

  void release() {
    for (cudaEvent_t& e : events_.all()) {
      if (e) (void)cudaEventDestroy(e);
      e = nullptr;
    }
    if (side_) (void)cudaStreamDestroy(side_);
    side_ = nullptr;
    if (base_) (void)cudaFree(base_);
    base_ = nullptr;
    (void)cudaGetLastError();
  }
  size_t slots() const { return 3 * static_cast<size_t>(comm_.size()) + 1; }

  /// The call's epilogue, as a launch of its own after the all-reduce (NCCL's operations cannot
  /// host it; the staged kernels see a chunk, not the message).
  template <class T>
  cudaError_t run_epilogue(const collective::call_args<T>& c, cudaStream_t stream) const {
    if (!c.epilogue.active()) return cudaSuccess;
    return epilogue::launch_epilogue<epilogue::sum_at::out>(c.epilogue, c.out, c.n, sms_, stream, false);
  }

  status finish(bool good, bool cuda_bad) {
    if (good) return status::success;
    if (cuda_bad) {
      (void)cudaGetLastError();  // the failed call's own error: leave none behind
      error_ = "a CUDA launch, event record or stream wait failed";
      return status::cuda_error;
    }
    error_ = "an NCCL call failed (see NCCL_DEBUG=WARN)";
    return status::nccl_error;
  }

  /// "p2p" when every rank is on this machine and NCCL may use peer-to-peer; else "net".
  static const char* link_class(echo::detail::collective_setup& setup) {
    const uint64_t mine = echo::detail::host_fingerprint();
    const std::vector<uint64_t> all = setup.all_gather(mine);
    const char* p2p_off = std::getenv("NCCL_P2P_DISABLE");
    bool local = !(p2p_off && std::strcmp(p2p_off, "0") != 0);
    for (uint64_t h : all) local = local && h == mine;
    return local ? "p2p" : "net";
  }

  communicator comm_;
  std::string gpu_name_;
  int sms_ = 1;
  const char* link_ = "p2p";
  size_t bytes_ = 0;
  unsigned char* base_ = nullptr;
  cudaStream_t side_ = nullptr;
  /// The stream-order edges of a call: fork to the side stream, then per buffer set (k % 2) the
  /// caller's pushes and reductions to the side stream and its exchanges and all-gathers back,
  /// then the join. One array underneath, so that creating and destroying them is one loop.
  struct events {
    cudaEvent_t fork = nullptr, pushed[sets] = {}, exchanged[sets] = {}, reduced[sets] = {}, gathered[sets] = {},
                join = nullptr;
    std::array<std::reference_wrapper<cudaEvent_t>, 2 + 4 * sets> all() {
      return {fork, pushed[0], pushed[1], exchanged[0], exchanged[1], reduced[0], reduced[1], gathered[0], gathered[1], join};
    }
  } events_;
  echo::detail::mapped_status status_;
  const char* error_ = "";
};

}  // namespace echo::transport::nccl
