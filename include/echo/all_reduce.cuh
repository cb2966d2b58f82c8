// echo::all_reduce<Quantizer, Transport, Compensator>: the host object that owns the workspace
// and launches the pipeline. Setup throws echo::error; calls return echo::status.
#pragma once

#include "chain.cuh"
#include "collective/oneshot_kernel.cuh"
#include "collective/pipeline_kernel.cuh"
#include "collective/pipeline_policy.cuh"
#include "communicator.cuh"
#include "comp/none.cuh"
#include "detail/cuda_check.cuh"
#include "detail/partition.cuh"
#include "dispatch_table.cuh"
#include "dtype.cuh"
#include "quant/none.cuh"
#include "transport/cuda_ipc.cuh"
#include "transport/nccl.cuh"

#include <algorithm>
#include <memory>
#include <type_traits>
#include <vector>

namespace echo {

/// fused: the pipeline writes every error. deferred: it writes only the errors of the rank's own
/// segment; the caller then runs update() (e.g. on a side stream beside the next GEMM) before
/// the next call of the chain. Both give identical state.
enum class state_update { fused, deferred };

struct all_reduce_options {
  size_t workspace_bytes = size_t(256) << 20;  ///< cap on the symmetric workspace per rank
  double spin_limit_seconds = 10.0;            ///< a peer missing longer than this is a timeout
  long long passthrough_below_bytes = -1;      ///< -1: from echo::dispatch_table
};

/// Stands in for the chain argument when the compensator keeps no state.
struct no_chain {};

template <class Quant, class Transport = transport::cuda_ipc, class Comp = comp::none,
          class Policy = collective::default_policy>
class all_reduce {
  static constexpr bool ipc = std::is_same<Transport, transport::cuda_ipc>::value;
  static_assert(ipc || std::is_same<Transport, transport::nccl>::value,
                "echo::all_reduce: Transport must be echo::transport::cuda_ipc or echo::transport::nccl");

 public:
  using quantizer = Quant;
  using compensator = Comp;
  using chain_type = std::conditional_t<Comp::enabled, chain<Comp>, no_chain>;
  using options = all_reduce_options;
  static constexpr int threads = Policy::threads;

  /// Collective: every rank of comm constructs one, with the same max_elements and options.
  all_reduce(const communicator& comm, size_t max_elements, options opt = {})
      : comm_(comm), max_elements_(max_elements), opt_(opt) {
    const char* call = "echo::all_reduce";
    ECHO_REQUIRE(max_elements > 0, call, "max_elements must be > 0");
    ECHO_CUDA_TRY(cudaSetDevice(comm.device()));
    cudaDeviceProp prop{};
    ECHO_CUDA_TRY(cudaGetDeviceProperties(&prop, comm.device()));
    sms_ = prop.multiProcessorCount;
    const dispatch_entry d = lookup_dispatch(prop.name, comm.size());
    passthrough_below_ = opt.passthrough_below_bytes >= 0 ? static_cast<size_t>(opt.passthrough_below_bytes) : d.passthrough_below;
    ECHO_CUDA_TRY(cudaHostAlloc(&status_, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable));
    *status_ = 0;
    ECHO_CUDA_TRY(cudaHostGetDevicePointer(reinterpret_cast<void**>(&d_status_), status_, 0));
    if (comm.size() > 1 && !ipc) {
      channel_ = std::make_unique<transport::nccl::channel>(comm, nccl_buffer_bytes(comm.size(), max_elements, opt.workspace_bytes));
    } else if (comm.size() > 1) {
      const size_t oneshot = collective::oneshot_layout{comm.size()}.total();
      ws_ = std::make_unique<transport::cuda_ipc::symmetric_buffer>(
          comm, pipeline_bytes(comm.size(), max_elements, opt.workspace_bytes) + oneshot);
      oneshot_region_ = (ws_->bytes() - oneshot) & ~size_t(255);
      std::vector<unsigned char*> peers(static_cast<size_t>(comm.size()));
      for (int r = 0; r < comm.size(); ++r) peers[static_cast<size_t>(r)] = ws_->peer_data(r);
      ECHO_CUDA_TRY(cudaMalloc(&d_peers_, sizeof(void*) * peers.size()));
      ECHO_CUDA_TRY(cudaMemcpy(d_peers_, peers.data(), sizeof(void*) * peers.size(), cudaMemcpyHostToDevice));
    }
  }

  all_reduce(const all_reduce&) = delete;
  all_reduce& operator=(const all_reduce&) = delete;
  ~all_reduce() {
    device_guard g(comm_.device());
    ws_.reset();
    channel_.reset();
    if (status_) (void)cudaFreeHost(status_);
    if (d_peers_) (void)cudaFree(d_peers_);
    (void)cudaGetLastError();
  }

  /// out = sum over ranks of in (n elements; in == out allowed), stream-ordered, no host sync,
  /// no allocation. T: float, __half / echo::half_t, __nv_bfloat16 / echo::bfloat16_t.
  template <class T>
  status operator()(const T* in, T* out, size_t n, cudaStream_t stream, chain_type* ch = nullptr,
                    state_update mode = state_update::fused) {
    using E = storage_of_t<T>;
    static_assert(is_element<E>::value, "echo::all_reduce: unsupported element type");
    const status s = check_call(in, out, n, ch, mode);
    if (s != status::success || n == 0) return s;
    device_guard g(comm_.device());
    if constexpr (Comp::enabled)
      if (ch->begin(n, stream) != cudaSuccess) return status::cuda_error;
    if (comm_.size() == 1) {
      if (in != out && cudaMemcpyAsync(out, in, n * sizeof(T), cudaMemcpyDeviceToDevice, stream) != cudaSuccess)
        return status::cuda_error;
      return status::success;
    }
    const size_t bytes = n * sizeof(T);
    auto* st = state_of(ch);
    if (bytes < passthrough_below_) {
      if constexpr (ipc && !Comp::enabled)
        if (bytes <= collective::oneshot_layout::slot_bytes)
          return launch_oneshot(reinterpret_cast<const E*>(in), reinterpret_cast<E*>(out), n, stream);
      return launch<quant::none>(reinterpret_cast<const E*>(in), reinterpret_cast<E*>(out), n, stream, st, mode);
    }
    return launch<Quant>(reinterpret_cast<const E*>(in), reinterpret_cast<E*>(out), n, stream, st, mode);
  }

  /// Runtime-dtype form (e.g. for a PyTorch extension).
  status operator()(dtype t, const void* in, void* out, size_t n, cudaStream_t stream, chain_type* ch = nullptr,
                    state_update mode = state_update::fused) {
    switch (t) {
      case dtype::f32: return (*this)(static_cast<const float*>(in), static_cast<float*>(out), n, stream, ch, mode);
      case dtype::f16: return (*this)(static_cast<const half_t*>(in), static_cast<half_t*>(out), n, stream, ch, mode);
      case dtype::bf16: return (*this)(static_cast<const bfloat16_t*>(in), static_cast<bfloat16_t*>(out), n, stream, ch, mode);
    }
    return status::invalid_argument;
  }

  /// The deferred half of a state_update::deferred call: same in (unchanged), n and chain.
  template <class T>
  status update(const T* in, size_t n, cudaStream_t stream, chain_type& ch) {
    using E = storage_of_t<T>;
    if constexpr (!Comp::enabled) {
      return status::success;
    } else {
      if (poisoned()) return status::poisoned;
      if (!in || n == 0 || n > max_elements_ || ch.size() != n || misaligned(in)) return status::invalid_argument;
      if (comm_.size() == 1) return status::success;
      device_guard g(comm_.device());
      if (n * sizeof(T) < passthrough_below_) return launch_update<quant::none>(reinterpret_cast<const E*>(in), n, stream, ch.data());
      return launch_update<Quant>(reinterpret_cast<const E*>(in), n, stream, ch.data());
    }
  }

  /// status::timeout (sticky) once any launch gave up on a missing peer; success otherwise.
  /// Reads host-mapped memory: synchronize the stream first to see a launch's outcome.
  status check() const { return *static_cast<volatile int*>(status_) ? status::timeout : status::success; }

  const communicator& comm() const { return comm_; }
  size_t max_elements() const { return max_elements_; }
  size_t workspace_bytes() const { return ws_ ? ws_->bytes() : channel_ ? channel_->bytes() : 0; }
  /// The part of the workspace a message streams through (cuda_ipc: less the one-shot region).
  size_t pipeline_workspace_bytes() const { return ws_ ? oneshot_region_ : workspace_bytes(); }
  size_t passthrough_below_bytes() const { return passthrough_below_; }

 private:
  struct device_guard {
    int prev = -1;
    explicit device_guard(int d) {
      if (cudaGetDevice(&prev) == cudaSuccess && prev != d) (void)cudaSetDevice(d);
      else prev = -1;
    }
    ~device_guard() {
      if (prev >= 0) (void)cudaSetDevice(prev);
    }
  };

  using storage = typename Comp::storage;
  static storage* state_of(chain_type* ch) {
    if constexpr (Comp::enabled) return ch->data();
    else return nullptr;
  }
  static bool misaligned(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) != 0; }
  bool poisoned() const { return *static_cast<volatile int*>(status_) != 0; }

  template <class T>
  status check_call(const T* in, T* out, size_t n, chain_type* ch, state_update mode) const {
    if (poisoned()) return status::poisoned;
    if (n == 0) return status::success;
    if (n > max_elements_ || !in || !out || misaligned(in) || misaligned(out)) return status::invalid_argument;
    if constexpr (Comp::enabled) {
      if (!ch || ch->capacity() < n || ch->device() != comm_.device()) return status::invalid_argument;
      if (mode == state_update::deferred && static_cast<const void*>(in) == static_cast<const void*>(out))
        return status::invalid_argument;  // the deferred update re-reads the input
    }
    return status::success;
  }

  /// cuda_ipc: workspace for one round of max_elements (so small messages never stream), capped.
  static size_t pipeline_bytes(int P, size_t max_elements, size_t cap) {
    const size_t worst_tile_elems = static_cast<size_t>(collective::tile_threads) * 8;  // the fewest values a flag covers
    const size_t seg = max_elements / P + 256 + worst_tile_elems;
    const size_t want = collective::workspace_layout::sync_bytes + 4096 +
                        2 * static_cast<size_t>(P) * (seg * 4 + (seg / worst_tile_elems + 1) * 4);
    const size_t floor = collective::workspace_layout::sync_bytes + 4096 + 2 * static_cast<size_t>(P) * (worst_tile_elems * 4 + 4);
    return std::max(floor, std::min(want, cap));
  }

  /// nccl: two buffer sets of 3P + 1 slots holding a segment at 4 bytes a value, capped.
  static size_t nccl_buffer_bytes(int P, size_t max_elements, size_t cap) {
    const size_t seg = max_elements / P + 2 * static_cast<size_t>(threads) * 32;
    return std::min(cap, 2 * (3 * static_cast<size_t>(P) + 1) * seg * 4);
  }

  template <class Q, class E>
  status launch(const E* in, E* out, size_t n, cudaStream_t stream, storage* st, state_update mode) {
    if constexpr (!ipc) {
      constexpr auto kernel = collective::reduce_kernel<Q, E, storage, Comp::enabled, threads, Policy::blocks_per_sm>;
      return channel_->template run<Q, E, storage, Comp::enabled, threads, Policy::blocks_per_sm>(in, out, st, mode == state_update::fused, n,
                                                                          stream, max_grid<kernel>());
    } else {
      return launch_ipc<Q>(in, out, n, stream, st, mode);
    }
  }

  template <class Q, class E>
  status launch_ipc(const E* in, E* out, size_t n, cudaStream_t stream, storage* st, state_update mode) {
    using codec = collective::tile_codec<Q, E>;
    constexpr auto kernel = collective::pipeline_kernel<Q, E, storage, Comp::enabled, threads, Policy::blocks_per_sm>;
    constexpr size_t sub_elems = static_cast<size_t>(collective::tile_threads) * codec::V;
    constexpr size_t warps = threads / 32;
    const int P = comm_.size();
    collective::kernel_params<E, storage> p{};
    p.in = in;
    p.out = out;
    p.state = st;
    p.fuse_send_state = mode == state_update::fused;
    p.n = n;
    p.granule = detail::granule_of<Q>();
    p.rank = comm_.rank();
    p.ranks = P;
    // A flag covers U sub-tiles: one while a segment has fewer sub-tiles than a large GPU has
    // warps (spread small messages wide), up to flag_elems values for large ones (amortise the
    // flag's fence). U must be the same on every rank, so it depends on n and constants only.
    constexpr size_t spread_warps = 2048;
    const size_t seg0 = detail::partition{n, p.granule, P}.size(0);
    const size_t u_max = std::max<size_t>(1, Policy::flag_elems / sub_elems);
    p.subtiles = static_cast<int>(std::min(u_max, std::max<size_t>(1, seg0 / (sub_elems * spread_warps))));
    const size_t tile_elems = sub_elems * p.subtiles;
    p.layout = collective::workspace_layout::fit(oneshot_region_, P, p.subtiles * codec::tile_bytes(collective::tile_threads));
    if (p.layout.tiles == 0) return status::invalid_argument;
    p.round_len = p.layout.tiles * tile_elems;
    p.local = ws_->data();
    p.peer = d_peers_;
    p.spin_limit_ns = static_cast<uint64_t>(opt_.spin_limit_seconds * 1e9);
    p.status = d_status_;
    const size_t rounds = (seg0 + p.round_len - 1) / p.round_len;
    const size_t tiles = std::min(p.layout.tiles, (seg0 + tile_elems - 1) / tile_elems);
    const int grid = static_cast<int>(std::min<size_t>(max_grid<kernel>(), std::max<size_t>(1, ((P - 1) * tiles + warps - 1) / warps)));
    for (size_t r = 0; r < rounds; ++r) {
      p.round_offset = r * p.round_len;
      kernel<<<grid, threads, 0, stream>>>(p);
    }
    return cudaGetLastError() == cudaSuccess ? status::success : status::cuda_error;
  }

  /// The one-shot 16-bit path (small messages, no compensation; collective/oneshot_kernel.cuh).
  template <class E>
  status launch_oneshot(const E* in, E* out, size_t n, cudaStream_t stream) {
    collective::oneshot_params<E> p{};
    p.in = in;
    p.out = out;
    p.n = n;
    p.rank = comm_.rank();
    p.ranks = comm_.size();
    p.layout = collective::oneshot_layout{comm_.size()};
    p.local = ws_->data();
    p.peer = d_peers_;
    p.region = oneshot_region_;
    p.spin_limit_ns = static_cast<uint64_t>(opt_.spin_limit_seconds * 1e9);
    p.status = d_status_;
    // Block b of every rank must cover the same range: the grid depends on n only.
    const size_t blocks = (n * sizeof(E) + (size_t(16) << 10) - 1) / (size_t(16) << 10);
    const int grid = static_cast<int>(std::min<size_t>(collective::oneshot_layout::max_blocks, std::max<size_t>(1, blocks)));
    collective::oneshot_kernel<E, 512><<<grid, 512, 0, stream>>>(p);
    return cudaGetLastError() == cudaSuccess ? status::success : status::cuda_error;
  }

  template <class Q, class E>
  status launch_update(const E* in, size_t n, cudaStream_t stream, storage* st) {
    constexpr auto kernel = collective::send_error_kernel<Q, E, storage, threads, Policy::blocks_per_sm>;
    kernel<<<max_grid<kernel>(), threads, 0, stream>>>(in, st, n, detail::granule_of<Q>(), comm_.rank(), comm_.size());
    return cudaGetLastError() == cudaSuccess ? status::success : status::cuda_error;
  }

  /// Co-resident blocks of a kernel on this GPU (a larger grid could deadlock on peer flags).
  /// Computed once per kernel: Echo assumes the GPUs of a node are of one model.
  template <auto Kernel>
  int max_grid() const {
    static const int per_sm = [] {
      int b = 0;
      if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, Kernel, threads, 0) != cudaSuccess) {
        (void)cudaGetLastError();
        b = 1;
      }
      return std::max(1, std::min(b, Policy::blocks_per_sm));
    }();
    return per_sm * sms_;
  }

  communicator comm_;
  size_t max_elements_;
  options opt_;
  int sms_ = 1;
  size_t passthrough_below_ = 0;
  int* status_ = nullptr;
  int* d_status_ = nullptr;
  std::unique_ptr<transport::cuda_ipc::symmetric_buffer> ws_;  // cuda_ipc
  std::unique_ptr<transport::nccl::channel> channel_;          // nccl
  unsigned char** d_peers_ = nullptr;  // device array of every rank's workspace
  size_t oneshot_region_ = 0;          // the one-shot region's offset; the pipeline uses what is before it
};

}  // namespace echo
