// transport::cuda_ipc's engine: single-node peer-to-peer over NVLink / PCIe through mapped memory.
//
// Device code pushes packets into peers' memory with plain 16-byte stores and publishes them with
// system-scope release flags (peer_channel.cuh, pipeline_kernel.cuh). One process may drive all
// GPUs (peers mapped with cudaDeviceEnablePeerAccess) or one process per GPU (cudaIpc handles
// exchanged through the communicator's all-gather: symmetric_buffer.cuh). Several ranks may share
// a GPU (for testing: P = 4 or 8 on 2 GPUs); the grid of each is then cut so that all of them stay
// resident at once.
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
#include "../../detail/preload.cuh"
#include "../../detail/signature.cuh"
#include "../../options.cuh"
#include "../../quant/closing.cuh"
#include "../../quant/none.cuh"
#include "../../tuning/dispatch_table.cuh"
#include "../../tuning/pipeline_policy.cuh"
#include "../../tuning/tier.cuh"
#include "colocated_streams.cuh"
#include "oneshot_kernel.cuh"
#include "peer_channel.cuh"
#include "pipeline_kernel.cuh"
#include "plan.cuh"
#include "symmetric_buffer.cuh"
#include "workspace_layout.cuh"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace echo::transport::cuda_ipc {

inline constexpr const char* name = "cuda_ipc";
/// The most ranks of one object: the GPUs of one node (eight on the machines it is built and
/// tested on; several ranks may share a GPU within that count). More ranks: transport::nccl.
inline constexpr int max_ranks = 8;

/// The engine of an echo::all_reduce over cuda_ipc: owns the symmetric workspace (its fixed
/// layout: workspace_layout.cuh) and plans and launches the one persistent kernel a
/// call (or the one-shot kernel for small unquantized calls).
template <class Config>
class engine {
  using Quant = typename Config::quant;
  using Comp = typename Config::comp;
  using Policy = typename Config::policy;
  template <class Q>
  using Wide = tuning::wide_policy_t<Policy, Q, Comp>;
  template <class Q>
  static constexpr bool has_wide = !std::is_same<Wide<Q>, Policy>::value;
  template <class Q>
  using Mid = tuning::mid_policy_t<Policy, Q, Comp>;
  template <class Q>
  static constexpr bool has_mid = Q::quantizes && !std::is_same<Mid<Q>, Policy>::value;
  /// What a call that closes its chain, and the sequence-parallel all-gather, code with (under
  /// Policy only: run_closing).
  using Closing = quant::closing_of_t<Quant>;
  static constexpr bool has_closing = Comp::keeps_state || Config::ops::sequence_parallel;

 public:
  /// The largest one-shot message. The one-shot sum is exact in fp32 and rounded once to T, as
  /// NCCL's is at P = 2; with a compensator the chain passes through it untouched (it injects no
  /// quantization error; its stored errors wait for the chain's next call of the same n).
  static constexpr size_t oneshot_bytes = size_t(1) << 20;
  /// Values a flag covers at least when the message is large (bounds the flag region).
  static constexpr size_t min_flag_elems = 2048;

  /// Collective: every rank of comm builds one, with the same arguments; it throws on every
  /// rank or on none (detail/collective_setup.cuh).
  engine(const communicator& comm, size_t max_elements, const all_reduce_options& opt)
      : comm_(comm), opt_(opt) {
    echo::detail::device_guard guard(comm.device());
    try {
      build(max_elements);
    } catch (...) {
      if (d_peers_) (void)cudaFree(d_peers_);  // buffer_ frees itself; the destructor will not run
      (void)cudaGetLastError();
      throw;
    }
  }
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;
  ~engine() {
    echo::detail::device_guard guard(comm_.device());
    if (colocated_) colocated_streams::leave(group_, comm_.rank());
    buffer_.reset();
    if (d_peers_) (void)cudaFree(d_peers_);
    (void)cudaGetLastError();
  }

  size_t workspace_bytes() const { return buffer_ ? buffer_->bytes() : 0; }
  /// The most ranks of the communicator on one GPU; grids are cut by it on every rank alike.
  int ranks_per_device() const { return buffer_ ? buffer_->ranks_per_device() : 1; }
  /// What a launch reported (0: nothing; else an echo::status code, sticky).
  int device_status() const { return status_.read(); }
  /// This rank's workspace (sync_words first, then workspace_layout), for
  /// tests and diagnostics that read or set the launch epoch; null at P = 1.
  unsigned char* workspace() const { return buffer_ ? buffer_->data() : nullptr; }
  tuning::dispatch_entry dispatch(int ranks) const { return tuning::lookup_dispatch(gpu_name_.c_str(), ranks, name, "p2p"); }

  /// From this many bytes a quantized call runs under the policy's wide variant, where the
  /// policy has no mid variant for it (or tuning::never).
  size_t wide_from_bytes() const { return wide_from_; }
  /// From this many bytes a quantized call below its wide size runs under the policy's mid
  /// variant (or tuning::never).
  size_t mid_from_bytes() const { return mid_from_; }
  /// Where the policy has a mid variant: the wide size of a quantized call of weight k
  /// (tuning::call_weight: lean, stateful or heavy; or tuning::never).
  size_t mid_to_bytes(tuning::call_weight k) const {
    return k == tuning::call_weight::lean ? mid_to_lean_
           : k == tuning::call_weight::stateful ? mid_to_stateful_
                                                    : mid_to_heavy_;
  }
  /// The size from which a call through Q runs under the wide variant.
  template <class Q>
  size_t wide_size() const {
    if constexpr (!Q::quantizes) return wide_from_unquantized_;
    else if constexpr (!has_mid<Q>) return wide_from_;
    else return mid_to_bytes(tuning::detail::weight_of<Q, Comp>());
  }
  /// The same for an unquantized call through the pipeline (quant::none).
  size_t wide_from_unquantized_bytes() const { return wide_from_unquantized_; }
  /// Whether the last quantized-path call ran under the wide variant (tests, diagnostics).
  bool last_run_wide() const { return last_wide_; }
  /// Whether the last quantized-path call ran under the mid variant.
  bool last_run_mid() const { return last_mid_; }

  using tier = tuning::tier;
  /// The tier a call of this many bytes through Q asks for (tuning::tier_for over this
  /// object's sizes; run() still falls back where the plan does not fit the rings).
  template <class Q>
  tier tier_for(size_t bytes) const {
    tuning::tier_sizes s;
    s.has_wide = has_wide<Q>;
    s.has_mid = has_mid<Q>;
    s.wide = wide_size<Q>();
    s.mid_from = mid_from_;
    s.wide_from = wide_from_;
    return tuning::tier_for(bytes, s);
  }

  /// A call through quantizer Q (Quant, or quant::none) on every rank: under the tier
  /// tier_for() names where its flow control fits the rings, else (quantized) under the mid
  /// policy from mid_from_bytes() on, else under Policy.
  template <class Q, class T>
  status run(const collective::call_args<T>& c, cudaStream_t stream) {
    if (const status s = claim_stream(stream); s != status::success) return s;
    return run_under_tier<Q>(c, stream);
  }

  /// Below the dispatch size: the one-shot kernel up to oneshot_bytes (an all-reduce), else
  /// quant::none through the pipeline (which, with a compensator, continues the chain: it keeps the
  /// rounding errors).
  template <class T>
  status run_unquantized(const collective::call_args<T>& c, cudaStream_t stream) {
    if (const status s = claim_stream(stream); s != status::success) return s;
    if (c.op == collective::operation::all_reduce && c.n * sizeof(T) <= layout_.oneshot_bytes) {
      last_wide_ = last_mid_ = false;
      return run_oneshot(c, stream);
    }
    return run_under_tier<quant::none>(c, stream);
  }

  /// A call that closes its chain, through Q (the object's closing quantizer): under Policy
  /// alone, whatever the size (closing calls are a few of a chain's; one kernel a type for them).
  template <class Q, class T>
  status run_closing(const collective::call_args<T>& c, cudaStream_t stream) {
    if (const status s = claim_stream(stream); s != status::success) return s;
    last_wide_ = last_mid_ = false;
    const plan p = make_plan<Policy, Q, T>(c.n, c.op);
    if (p.why) return fail(p.why);
    return launch<Policy, Q, T>(c, p, stream);
  }

  const char* last_error() const { return error_; }

  /// The deferred half of a state_update::deferred call through Q (collective/state_kernels.cuh):
  /// this rank's state only, no peer. A failed launch leaves the object usable.
  template <class Q, class T>
  status run_update(const T* in, size_t n, unsigned char* state, cudaStream_t stream) {
    return collective::run_update<Config, Q>(in, n, state, comm_.rank(), comm_.size(), sms_, stream, error_);
  }

 private:
  /// The tier options are this transport's own (all_reduce agrees on the rest): ranks under other
  /// tiers would run other plans, so every rank must have been given the same (collective).
  void agree_tiers(echo::detail::collective_setup& setup, const char* call) {
    struct record {
      uint64_t wide_from, mid_from;  // 0 where unset
      uint64_t set;                  // bit 0: wide_from given, bit 1: mid_from given
    };
    const record mine{opt_.wide_policy_from_bytes.value_or(0), opt_.mid_policy_from_bytes.value_or(0),
                      uint64_t{opt_.wide_policy_from_bytes.has_value()} | uint64_t{opt_.mid_policy_from_bytes.has_value()} << 1};
    const std::vector<record> all = setup.all_gather(mine);
    for (size_t r = 0; r < all.size(); ++r) {
      const std::string who = "rank " + std::to_string(r) + " and rank " + std::to_string(comm_.rank()) + " ";
      ECHO_REQUIRE(all[r].wide_from == mine.wide_from && (all[r].set & 1) == (mine.set & 1), call,
                   who + "were built with different options.wide_policy_from_bytes");
      ECHO_REQUIRE(all[r].mid_from == mine.mid_from && (all[r].set & 2) == (mine.set & 2), call,
                   who + "were built with different options.mid_policy_from_bytes");
    }
  }

  template <class Q, class T>
  status run_under_tier(const collective::call_args<T>& c, cudaStream_t stream) {
    const size_t bytes = c.n * sizeof(T);
    last_wide_ = last_mid_ = false;
    if constexpr (has_wide<Q>) {
      if (tier_for<Q>(bytes) == tier::wide) {
        const plan w = make_plan<Wide<Q>, Q, T>(c.n, c.op);
        last_wide_ = !w.why;
        if (!w.why) return launch<Wide<Q>, Q, T>(c, w, stream);
      }
    }
    if constexpr (has_mid<Q>) {
      if (bytes >= mid_from_) {
        // Ranks sharing a context need one launch a call (one_launch_ring_bytes sizes their
        // rings for it); should a phase-schedule mid plan need several rounds there, Policy
        // takes the call.
        const plan m = make_plan<Mid<Q>, Q, T>(c.n, c.op);
        last_mid_ = !m.why && (!colocated_ || Mid<Q>::stage_lag > 0 || m.tiles0 <= m.ring);
        if (last_mid_) return launch<Mid<Q>, Q, T>(c, m, stream);
      }
    }
    const plan p = make_plan<Policy, Q, T>(c.n, c.op);
    if (p.why) return fail(p.why);
    return launch<Policy, Q, T>(c, p, stream);
  }

  static constexpr size_t min_ring_bytes = size_t(64) << 10;
  /// Phase schedule: one flag per sub-tile while a segment has fewer sub-tiles than this many
  /// (spread small messages over the warps), more above (fewer system-scope fences): measured.
  static constexpr size_t spread_warps = 2048;

  void build(size_t max_elements) {
    const communicator& comm = comm_;
    const all_reduce_options& opt = opt_;
    const char* call = "echo::all_reduce (cuda_ipc engine)";
    // Before any exchange: P is the same on every rank, so every rank throws here alike.
    ECHO_REQUIRE(comm.size() <= max_ranks, call,
                 std::to_string(comm.size()) + " ranks: cuda_ipc serves at most " + std::to_string(max_ranks) +
                     " (the GPUs of one node); use transport::nccl");
    echo::detail::collective_setup setup(comm, call);
    const int P = comm.size();
    setup.local([&] {
      status_.allocate();
      collective::preload_update_kernels<Config>();
      cudaDeviceProp prop{};
      ECHO_CUDA_TRY(cudaGetDeviceProperties(&prop, comm.device()));
      sms_ = prop.multiProcessorCount;
      gpu_name_ = prop.name;
      const tuning::dispatch_sizes d = dispatch(P).sizes;
      if (opt.wide_policy_from_bytes) {
        wide_from_ = mid_to_heavy_ = mid_to_lean_ = mid_to_stateful_ = wide_from_unquantized_ = *opt.wide_policy_from_bytes;
      } else {
        wide_from_ = d.wide_from;
        mid_to_heavy_ = d.mid_to_heavy;
        mid_to_lean_ = d.mid_to_lean;
        mid_to_stateful_ = d.mid_to_stateful;
        wide_from_unquantized_ = d.wide_from_unquantized;
      }
      mid_from_ = opt.mid_policy_from_bytes.value_or(d.mid_from);
      epilogue_in_launch_ = opt.epilogue_in_launch_bytes.value_or(d.epilogue_in_launch);
    });
    agree_tiers(setup, call);
    if (P == 1) return setup.agree();
    layout_.ranks = P;
    const size_t max_seg = echo::detail::partition{max_elements, 32, P}.size(0);
    layout_.flag_tiles = std::max<size_t>(64, echo::detail::ceil_div(max_seg, min_flag_elems) + 1);
    // Never more than a message of max_elements needs: the one-shot halves hold its bytes at
    // fp32, the rings its whole segment under every configuration (so no call of this object
    // wraps them), unless options.workspace_bytes caps them lower.
    layout_.oneshot_bytes = std::min(oneshot_bytes, (max_elements * sizeof(float) + 255) & ~size_t(255));
    const size_t cap = opt.workspace_bytes / (2 * static_cast<size_t>(P)) & ~size_t(255);
    layout_.ring_bytes = std::max(min_ring_bytes, std::min(cap, message_ring_bytes(max_seg)));
    colocated_ = ranks_per_context(setup) > 1;  // an exchange: reports the steps above
    if (colocated_) layout_.ring_bytes = std::max(layout_.ring_bytes, one_launch_ring_bytes(max_seg));
    buffer_ = std::make_unique<symmetric_buffer>(comm, layout_.total());  // collective itself
    setup.local([&] {
      std::vector<unsigned char*> peers(static_cast<size_t>(P));
      for (int r = 0; r < P; ++r) peers[static_cast<size_t>(r)] = buffer_->peer_data(r);
      ECHO_CUDA_TRY(cudaMalloc(&d_peers_, sizeof(void*) * peers.size()));
      ECHO_CUDA_TRY(echo::detail::write_device_now(d_peers_, peers.data(), sizeof(void*) * peers.size()));
      ECHO_REQUIRE(buffer_->ranks_per_device() >= 1, call, "no rank on this device");
      // Every kernel a call may launch, loaded now (detail/preload.cuh: ranks sharing a GPU).
      preload<float>();
      preload<half_t>();
      preload<bfloat16_t>();
    });
    setup.agree();
    if (colocated_) colocated_streams::join(group_, comm_.rank(), P, &calls_);
  }

  /// The most ranks of comm that one process drives on one GPU (collective). Such ranks share a
  /// CUDA context, and their streams can share one of the device's hardware work queues
  /// (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default, fewer than the streams a process makes): a
  /// second launch of one rank's call queued there ahead of a co-located peer's first launch
  /// waits behind its own first launch, which spins until the peer's arrives, which waits behind
  /// it: a deadlock until the spin limit. So for them every call is planned as one launch (the
  /// rings hold a whole call; docs/transports.md). Ranks in separate processes time-slice instead.
  int ranks_per_context(echo::detail::collective_setup& setup) {
    struct entry {
      uint64_t host;
      uint64_t nonce;  // rank 0's names the object group (colocated_streams)
      int pid;
      char bus_id[32];
    } mine{echo::detail::host_fingerprint(), group_nonce(), static_cast<int>(getpid()), {}};
    setup.local([&] { ECHO_CUDA_TRY(cudaDeviceGetPCIBusId(mine.bus_id, sizeof mine.bus_id, comm_.device())); });
    const std::vector<entry> all = setup.all_gather(mine);
    group_ = all[0].nonce;
    int most = 1;
    for (const entry& a : all) {
      int n = 0;
      for (const entry& b : all)
        n += a.host == b.host && a.pid == b.pid && std::strncmp(a.bus_id, b.bus_id, sizeof a.bus_id) == 0;
      most = std::max(most, n);
    }
    return most;
  }
  static uint64_t group_nonce() {
    std::random_device rd;
    const uint64_t t = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    return echo::detail::signature().add((uint64_t(rd()) << 32) | rd()).add(t).add(static_cast<uint64_t>(getpid())).wide();
  }

  /// Co-located ranks: refuse a call on the stream that another rank of this process already
  /// made the same call on (colocated_streams), and make every rank's call give up at once: the
  /// abort word of every rank's workspace is set (the one a kernel that gives up sets), so kernels
  /// in flight stop spinning and later launches do nothing; every object is poisoned.
  status claim_stream(cudaStream_t stream) {
    if (!colocated_ || colocated_streams::claim(group_, comm_.rank(), stream)) return status::success;
    const uint32_t code = static_cast<uint32_t>(status::mismatch);
    cudaStream_t side = nullptr;
    if (cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking) == cudaSuccess) {
      for (int r = 0; r < comm_.size(); ++r)
        (void)cudaMemcpyAsync(buffer_->peer_data(r) + 4 * sync_words::abort, &code, sizeof code,
                              cudaMemcpyHostToDevice, side);
      (void)cudaStreamSynchronize(side);
      (void)cudaStreamDestroy(side);
    }
    (void)cudaGetLastError();
    status_.mark(static_cast<int>(code));
    error_ = "stream: another rank of this object in this process made this call on the same stream (its kernel "
             "would wait behind that one's, which waits for it): give each co-located rank its own stream; "
             "every rank's call was aborted, rebuild the objects";
    return status::invalid_argument;
  }

  /// Ring bytes a peer needs for a segment of max_seg values to fit one round (one launch) on
  /// every path of the phase schedule (Policy's, and the mid policy's): the most that any of the
  /// object's configurations needs for every sub-tile of the segment and a flag's worth of
  /// rounding.
  static size_t one_launch_ring_bytes(size_t max_seg) {
    size_t bytes = one_round_ring_bytes<Policy, Quant>(max_seg, true);
    if constexpr (has_mid<Quant>) {
      if (Mid<Quant>::stage_lag == 0) bytes = std::max(bytes, one_round_ring_bytes<Mid<Quant>, Quant>(max_seg, false));
    }
    if constexpr (has_closing) bytes = std::max(bytes, one_round_ring_bytes<Policy, Closing>(max_seg, false));
    return bytes;
  }
  /// Ring bytes a peer needs for a segment of max_seg values under every configuration of the
  /// object (Policy, its mid and wide variants, quantized and not, every element type).
  static size_t message_ring_bytes(size_t max_seg) {
    size_t bytes = one_round_ring_bytes<Policy, Quant>(max_seg, true);
    if constexpr (has_mid<Quant>) bytes = std::max(bytes, one_round_ring_bytes<Mid<Quant>, Quant>(max_seg, false));
    if constexpr (has_wide<Quant>) bytes = std::max(bytes, one_round_ring_bytes<Wide<Quant>, Quant>(max_seg, false));
    if constexpr (has_wide<quant::none>)
      bytes = std::max(bytes, one_round_ring_bytes<Wide<quant::none>, quant::none>(max_seg, false));
    if constexpr (has_closing) bytes = std::max(bytes, one_round_ring_bytes<Policy, Closing>(max_seg, false));
    return bytes;
  }
  /// One round of Pol for calls through Q on every element type (and through quant::none).
  template <class Pol, class Q>
  static size_t one_round_ring_bytes(size_t max_seg, bool unquantized_too) {
    size_t b = std::max({round_bytes<Pol, Q, float>(max_seg), round_bytes<Pol, Q, half_t>(max_seg),
                         round_bytes<Pol, Q, bfloat16_t>(max_seg)});
    if (unquantized_too)
      b = std::max({b, round_bytes<Pol, quant::none, float>(max_seg), round_bytes<Pol, quant::none, half_t>(max_seg),
                    round_bytes<Pol, quant::none, bfloat16_t>(max_seg)});
    return (b + 255) & ~size_t(255);
  }
  template <class Pol, class Q, class T>
  static size_t round_bytes(size_t max_seg) {
    using Cfg = collective::tile_config<Q, T, Comp, Pol>;
    // + 2 flags' worth of values: a quantizer's granule (its group) can lengthen segment 0
    const size_t values = max_seg + 2 * static_cast<size_t>(Pol::flag_elems);
    const size_t subs = echo::detail::ceil_div(values, Cfg::sub_elems) + Pol::flag_elems / Cfg::sub_elems + 1;
    return subs * Cfg::sub_bytes;
  }

  /// The pipeline kernel of an operation, as a type (with_kernel's argument).
  template <auto K>
  struct kernel_tag {
    static constexpr auto value = K;
  };
  /// Which pair operations Q's kernels serve on this object: the reduce-scatter codes with Quant (or
  /// quant::none below the dispatch size), the all-gather with Closing (or quant::none); no
  /// kernel is built for an operation its quantizer never runs.
  template <class Q>
  static constexpr bool scatters = Config::ops::sequence_parallel &&
                                   (std::is_same<Q, Quant>::value || std::is_same<Q, quant::none>::value);
  template <class Q>
  static constexpr bool gathers = Config::ops::sequence_parallel &&
                                  (std::is_same<Q, Closing>::value || std::is_same<Q, quant::none>::value);

  /// f(kernel_tag<the pipeline kernel of Cfg for op>), for an op that Cfg's quantizer serves
  /// (make_plan refuses the others before any launch).
  template <class Cfg, class F>
  static decltype(auto) with_kernel(collective::operation op, F&& f) {
    using collective::operation;
    using Q = typename Cfg::quant;
    if constexpr (scatters<Q>) {
      if (op == operation::reduce_scatter) return f(kernel_tag<pipeline_kernel<Cfg, operation::reduce_scatter>>{});
    }
    if constexpr (gathers<Q>) {
      if (op == operation::all_gather) return f(kernel_tag<pipeline_kernel<Cfg, operation::all_gather>>{});
    }
    return f(kernel_tag<pipeline_kernel<Cfg>>{});
  }

  template <class Pol, class Q, class T>
  void preload_kernel() const {
    using Cfg = collective::tile_config<Q, T, Comp, Pol>;
    auto load = [&](auto k) {
      echo::detail::preload_kernels(decltype(k)::value);
      (void)max_grid<Pol, decltype(k)::value>();  // its occupancy query too
    };
    load(kernel_tag<pipeline_kernel<Cfg>>{});
    if constexpr (scatters<Q>) load(kernel_tag<pipeline_kernel<Cfg, collective::operation::reduce_scatter>>{});
    if constexpr (gathers<Q>) load(kernel_tag<pipeline_kernel<Cfg, collective::operation::all_gather>>{});
  }

  template <class T>
  void preload() const {
    preload_kernel<Policy, Quant, T>();
    preload_kernel<Policy, quant::none, T>();
    if constexpr (has_wide<Quant>) preload_kernel<Wide<Quant>, Quant, T>();
    if constexpr (has_wide<quant::none>) preload_kernel<Wide<quant::none>, quant::none, T>();
    if constexpr (has_mid<Quant>) preload_kernel<Mid<Quant>, Quant, T>();
    if constexpr (has_closing && !std::is_same<Closing, Quant>::value) preload_kernel<Policy, Closing, T>();
    echo::detail::preload_kernels(oneshot_kernel<T, oneshot_threads>, epilogue::epilogue_kernel<T, epilogue::sum_at::residual>);
    (void)oneshot_blocks_per_sm<T>();  // its occupancy query too
  }

  /// How a call of n values is cut under policy Pol (cuda_ipc::make_plan over this object's
  /// ring and flag region and the resident grid of this GPU model).
  template <class Pol, class Q, class T>
  plan make_plan(size_t n, collective::operation op) const {
    using Cfg = collective::tile_config<Q, T, Comp, Pol>;
    // Every launch is planned first: an operation routed to a quantizer that does not serve it
    // is refused here, alike on every rank, rather than run through another operation's kernel.
    if ((op == collective::operation::reduce_scatter && !scatters<Q>) ||
        (op == collective::operation::all_gather && !gathers<Q>)) {
      plan refused;
      refused.why = "op: not served through this quantizer on this object";
      return refused;
    }
    plan_inputs in;
    const size_t seg0 = echo::detail::partition{n, echo::detail::granule_of<Q>(), comm_.size()}.size(0);
    in.subs0 = echo::detail::ceil_div(seg0, Cfg::sub_elems);
    in.block_warps = Cfg::warps;
    in.resident = with_kernel<Cfg>(op, [&](auto k) { return static_cast<size_t>(max_grid<Pol, decltype(k)::value>()); }) *
                  Cfg::warps;
    in.u_max = std::max<size_t>(1, Pol::flag_elems / Cfg::sub_elems);
    in.flag_tiles = layout_.flag_tiles;
    in.ring_bytes = layout_.ring_bytes;
    in.sub_bytes = Cfg::sub_bytes;
    in.stage_lag = static_cast<size_t>(Pol::stage_lag);
    in.spread_warps = spread_warps;
    return cuda_ipc::make_plan(in);
  }

  template <class Pol, class Q, class T>
  status launch(const collective::call_args<T>& c, const plan& pl, cudaStream_t stream) {
    using Cfg = collective::tile_config<Q, T, Comp, Pol>;
    pipeline_params<T> p{};
    p.in = c.in;
    p.out = c.out;
    p.state = c.state;
    p.store_send_errors = c.mode == state_update::fused && !c.closes;
    p.keep_own = !c.closes;
    p.n = c.n;
    p.chain_key = comp::state_header::key(c.n, Cfg::domain);
    p.element_type = static_cast<unsigned>(element_traits<T>::tag);
    p.granule = echo::detail::granule_of<Q>();
    // the policy's shape too: ranks that chose different policies report a mismatch
    p.sig = echo::detail::signature()
                .add(c.sig)
                .add(pl.U)
                .add(pl.ring)
                .add(Pol::stage_lag)
                .add(static_cast<uint64_t>(Pol::threads))
                .add(static_cast<uint64_t>(Pol::blocks_per_sm))
                .add(static_cast<uint64_t>(Pol::lane_values))
                .add(static_cast<uint64_t>(Pol::flag_elems))
                .add(1)
                .value();
    p.subtiles = static_cast<int>(pl.U);
    p.ring = pl.ring;
    p.epilogue = c.epilogue;
    p.rows_in_kernel = epilogue_in_launch_.holds(c.n * sizeof(T));
    p.layout = layout_;
    p.channel = channel();
    const status s = with_kernel<Cfg>(c.op, [&](auto k) {
      constexpr auto kernel = decltype(k)::value;
      // Programmatic launches (detail/dependent_launch.cuh) only for kernels built with the wait,
      // and not into a graph being captured (the plain edge is what every GPU's capture supports).
      const bool programmatic = !c.capturing && echo::detail::waits_for_prior_grid<kernel>();
      // One launch (overlapped), or one a round of `ring` tiles: every rank makes the same rounds.
      const size_t per_launch = Pol::stage_lag > 0 ? pl.tiles0 : pl.ring;
      for (size_t t0 = 0; t0 < pl.tiles0; t0 += per_launch) {
        p.t_begin = t0;
        p.t_end = std::min(pl.tiles0, t0 + per_launch);
        p.last = p.t_end == pl.tiles0;
        if (echo::detail::launch_dependent(kernel, pl.grid, Cfg::threads, stream, programmatic, p) != cudaSuccess)
          return launch_failed();
      }
      return status::success;
    });
    if (s != status::success) return s;
    if (c.epilogue.active() && !p.rows_in_kernel) {
      // The rows on the whole GPU, after the pipeline added the all-reduce into the residual. A
      // failed launch poisons the object as a failed pipeline launch does: the call's kernels are
      // queued, and the object's call order and chain bookkeeping would no longer match them.
      constexpr auto rows = epilogue::epilogue_kernel<T, epilogue::sum_at::residual>;
      const bool after = !c.capturing && echo::detail::waits_for_prior_grid<rows>();
      if (epilogue::launch_epilogue<epilogue::sum_at::residual>(c.epilogue, c.out, c.n, sms_, stream, after) != cudaSuccess)
        return launch_failed();
    }
    return status::success;
  }

  /// A collective launch failed: its peers wait for flags this rank will never publish (they
  /// end at their spin limits), and this rank's epochs no longer follow theirs, so the object
  /// is poisoned here too (check() reports cuda_error, later calls return poisoned). The status
  /// comes from the launch call itself, never from cudaGetLastError(): an unrelated error the
  /// caller's thread left behind must not fail (and poison) a call that ran.
  status launch_failed() {
    (void)cudaGetLastError();  // the launch's own error: leave none behind
    error_ = "a kernel launch failed; the object is poisoned (its peers time out)";
    status_.mark(static_cast<int>(status::cuda_error));
    return status::cuda_error;
  }

  status fail(const char* why) {
    error_ = why;
    return status::invalid_argument;
  }

  static constexpr int oneshot_threads = 512;

  template <class T>
  status run_oneshot(const collective::call_args<T>& c, cudaStream_t stream) {
    constexpr int threads = oneshot_threads;
    oneshot_params<T> p{};
    p.in = c.in;
    p.out = c.out;
    p.n = c.n;
    p.epilogue = c.epilogue;
    p.layout = layout_;
    p.channel = channel();
    // Block b of every rank must cover the same range: the grid depends on n (and the GPU) only.
    constexpr size_t per_block = size_t(16) << 10;
    const size_t blocks = echo::detail::ceil_div(c.n * sizeof(T), per_block);
    // Every block resident at once (they wait on each other's peers): as many an SM as fit, at
    // most 2 (the epilogue's loads in flight take the registers of a second block of 512).
    const int most = std::max(1, std::min(64, sms_ * oneshot_blocks_per_sm<T>() / ranks_per_device()));
    const int grid = static_cast<int>(std::min<size_t>(static_cast<size_t>(most), std::max<size_t>(1, blocks)));
    p.sig = echo::detail::signature().add(c.sig).add(grid).add(2).value();
    constexpr auto kernel = oneshot_kernel<T, threads>;
    const bool programmatic = !c.capturing && echo::detail::waits_for_prior_grid<kernel>();
    if (echo::detail::launch_dependent(kernel, grid, threads, stream, programmatic, p) != cudaSuccess) return launch_failed();
    return status::success;
  }

  /// Blocks of the one-shot kernel for T resident at once on an SM (1 or 2). Computed once.
  template <class T>
  static int oneshot_blocks_per_sm() {
    static const int per_sm = [] {
      int b = 0;
      if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, oneshot_kernel<T, oneshot_threads>, oneshot_threads, 0) !=
          cudaSuccess) {
        (void)cudaGetLastError();
        b = 1;
      }
      return std::max(1, std::min(b, 2));
    }();
    return per_sm;
  }

  /// Blocks of Kernel that are resident at once on a GPU, shared among the ranks on it: a larger
  /// grid could wait forever on peer flags (its spinning blocks holding the SMs the rest needs).
  /// Computed once per kernel; Echo assumes one GPU model in a node (and a rank whose GPU plans
  /// otherwise makes the call fail with status::mismatch, through the signature).
  template <class Pol, auto Kernel>
  int max_grid() const {
    static const int per_sm = [] {
      int b = 0;
      if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, Kernel, Pol::threads, 0) != cudaSuccess) {
        (void)cudaGetLastError();
        b = 1;
      }
      return std::max(1, std::min(b, Pol::blocks_per_sm));
    }();
    return std::max(1, per_sm * sms_ / ranks_per_device());
  }

  /// The kernels' device handle of this rank's workspace and its peers'.
  peer_channel channel() const {
    return {buffer_->data(), d_peers_, comm_.rank(), comm_.size(), static_cast<uint64_t>(opt_.spin_limit_seconds * 1e9),
            status_.device()};
  }

  communicator comm_;
  all_reduce_options opt_;
  int sms_ = 1;
  std::string gpu_name_;
  workspace_layout layout_{};
  std::unique_ptr<symmetric_buffer> buffer_;
  unsigned char** d_peers_ = nullptr;
  echo::detail::mapped_status status_;
  const char* error_ = "";
  size_t wide_from_ = tuning::never, wide_from_unquantized_ = tuning::never;
  size_t mid_from_ = tuning::never, mid_to_heavy_ = tuning::never, mid_to_lean_ = tuning::never, mid_to_stateful_ = tuning::never;
  tuning::size_band epilogue_in_launch_;  ///< rank-local: the rows' bits are the same either way
  bool colocated_ = false;  ///< ranks of comm share a CUDA context (ranks_per_context)
  uint64_t group_ = 0;      ///< names this object's group among the process's (ranks_per_context)
  colocated_streams::log calls_;  ///< this rank's calls, for claim_stream
  bool last_wide_ = false, last_mid_ = false;
};

}  // namespace echo::transport::cuda_ipc
