// echo::all_reduce<Quantizer, Transport, Compensator, Policy>: the host object. It checks a call's
// arguments, picks the quantized or the unquantized path by size, orders the object's calls, and
// hands the call to its transport's engine (Transport::engine<collective::config<...>>), which owns
// the workspace and launches the kernels. Setup throws echo::error; calls return echo::status.
//
// Rules for callers (README.md, "Use"):
//  - in and out are device memory of the rank's GPU or pinned host memory, a chain's state device
//    memory, all 16-byte aligned; in == out
//    is allowed, other overlaps are not.
//  - every rank makes the same sequence of calls with the same n and element type; a rank that
//    disagrees makes the call fail on every rank with status::mismatch (cuda_ipc) or, where NCCL
//    cannot complete the exchange, hang in NCCL like NCCL's own collectives (transport::nccl).
//  - calls of one object are ordered: made on different streams, a call waits for the previous
//    one (not while capturing a CUDA graph: a graph must not be replayed concurrently with other
//    calls of its object).
//  - one object per rank; with communicator::local, construct objects from one thread per rank
//    (echo::for_each_rank); calls may then come from any thread, one at a time per object.
#pragma once

#include "chain.cuh"
#include "collective/config.cuh"
#include "collective/operation.cuh"
#include "communicator.cuh"
#include "comp/error_feedback.cuh"
#include "comp/none.cuh"
#include "comp/traits.cuh"
#include "detail/collective_setup.cuh"
#include "detail/cuda_check.cuh"
#include "detail/device_guard.cuh"
#include "detail/signature.cuh"
#include "dtype.cuh"
#include "epilogue/residual_rms_norm.cuh"
#include "epilogue/rows.cuh"
#include "options.cuh"
#include "quant/clipped.cuh"
#include "quant/closing.cuh"
#include "quant/none.cuh"
#include "quant/traits.cuh"
#include "quant/transform.cuh"
#include "reference/segments.cuh"
#include "transport/cuda_ipc/tag.cuh"
#include "transport/traits.cuh"
#include "tuning/dispatch_table.cuh"
#include "tuning/pipeline_policy.cuh"

#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

namespace echo {

/// Stands in for the chain argument when the compensator keeps no state.
struct no_chain {};

/// Ops: what the object serves besides the all-reduce (collective/operation.cuh): all_reduce_only,
/// or with_sequence_parallel (reduce_scatter and all_gather; echo::sequence_parallel names it).
template <class Quant, class Transport = transport::cuda_ipc::tag, class Comp = comp::none,
          class Policy = tuning::default_policy, class Ops = collective::all_reduce_only>
class all_reduce {
  static_assert(quant::check_quantizer<Quant>::value && comp::check_compensator<Comp, Quant>::value);
  static_assert(collective::is_operation_set<Ops>::value,
                "echo::all_reduce: Ops must be collective::all_reduce_only or collective::with_sequence_parallel");
  static_assert(!Ops::sequence_parallel || std::is_same<Transport, echo::transport::cuda_ipc::tag>::value,
                "echo::sequence_parallel: reduce_scatter and all_gather run on transport::cuda_ipc (transport::nccl's "
                "staged kernels serve the all-reduce alone)");
  using config_type = collective::config<Quant, Comp, Policy, Ops>;
  static_assert(transport::is_transport_for<Transport, config_type>::value,
                "echo::all_reduce: Transport is not a transport: it needs name and engine<Config> (transport/traits.cuh)");
  using engine_type = typename Transport::template engine<config_type>;

 public:
  using quantizer = Quant;
  /// What close_chain() codes with (quant::closing_of: Quant's family and group at 8 bits, its transform).
  using closing_quantizer = quant::closing_of_t<Quant>;
  using compensator = Comp;
  using transport = Transport;
  using chain_type = std::conditional_t<Comp::keeps_state, chain<Comp>, no_chain>;
  using view_type = chain_view<Comp>;
  using options = all_reduce_options;

  /// Collective: every rank of comm constructs one, with the same configuration, max_elements and
  /// options (checked: a rank that differs makes the constructor throw on every rank).
  all_reduce(const communicator& comm, size_t max_elements, options opt = {})
      : comm_(comm), max_elements_(max_elements), opt_(opt) {
    detail::device_guard guard(comm.device());
    try {
      build();
    } catch (...) {
      if (done_) (void)cudaEventDestroy(done_);  // engine_ frees itself; the destructor will not run
      (void)cudaGetLastError();
      throw;
    }
  }

  all_reduce(const all_reduce&) = delete;
  all_reduce& operator=(const all_reduce&) = delete;
  ~all_reduce() {
    detail::device_guard g(comm_.device());
    engine_.reset();
    if (done_) (void)cudaEventDestroy(done_);
    (void)cudaGetLastError();
  }

  /// out = sum over ranks of in (n elements), stream-ordered, no host synchronisation, no
  /// allocation. T: float, __half / echo::half_t, __nv_bfloat16 / echo::bfloat16_t. With a
  /// compensator that keeps state, the chain is required. Never throws.
  template <class T>
  status operator()(const T* in, T* out, size_t n, cudaStream_t stream, chain_type* ch = nullptr,
                    state_update mode = state_update::fused) {
    return chained(in, out, n, stream, ch, mode, chain_call::continues, epilogue::none{});
  }

  /// The same with the state in caller memory (chain_view; not needed without state).
  template <class T>
  status operator()(const T* in, T* out, size_t n, cudaStream_t stream, view_type state,
                    state_update mode = state_update::fused) {
    return submit(in, out, n, stream, state, mode, chain_call::continues, epilogue::none{});
  }

  /// The call with the residual + RMSNorm epilogue (epilogue/residual_rms_norm.cuh), in the same
  /// launch: out receives the normalised rows of residual + the all-reduce, epi.residual that sum.
  template <class T>
  status operator()(const T* in, T* out, size_t n, cudaStream_t stream, const epilogue::residual_rms_norm<T>& epi,
                    chain_type* ch = nullptr, state_update mode = state_update::fused) {
    return chained(in, out, n, stream, ch, mode, chain_call::continues, epi);
  }
  template <class T>
  status operator()(const T* in, T* out, size_t n, cudaStream_t stream, const epilogue::residual_rms_norm<T>& epi,
                    view_type state, state_update mode = state_update::fused) {
    return submit(in, out, n, stream, state, mode, chain_call::continues, epi);
  }

  /// Runtime-dtype forms (e.g. for a PyTorch extension).
  status operator()(dtype t, const void* in, void* out, size_t n, cudaStream_t stream, view_type state = {},
                    state_update mode = state_update::fused) {
    return typed(t, in, out, [&](const auto* i, auto* o) { return submit(i, o, n, stream, state, mode, chain_call::continues, epilogue::none{}); });
  }
  status operator()(dtype t, const void* in, void* out, size_t n, cudaStream_t stream, chain_type* ch,
                    state_update mode = state_update::fused) {
    return typed(t, in, out, [&](const auto* i, auto* o) { return chained(i, o, n, stream, ch, mode, chain_call::continues, epilogue::none{}); });
  }
  status operator()(dtype t, const void* in, void* out, size_t n, cudaStream_t stream,
                    const epilogue::residual_rms_norm<void>& epi, view_type state = {},
                    state_update mode = state_update::fused) {
    return typed(t, in, out, [&](const auto* i, auto* o) { return submit(i, o, n, stream, state, mode, chain_call::continues, typed_epilogue(epi, o)); });
  }

  /// The call that closes its chain (the last all-reduce of a forward pass): its input plus the
  /// chain's stored errors are sent as closing_quantizer's codes (8 bits), so that what the chain
  /// still owed is paid at the finer step; it keeps no error and leaves the chain fresh. Below the
  /// unquantized size it is that exact call (the chain, whose calls of this n were exact too, stays
  /// as it was). Without state, the plain call. Never throws.
  template <class T>
  status close_chain(const T* in, T* out, size_t n, cudaStream_t stream, chain_type* ch = nullptr) {
    return chained(in, out, n, stream, ch, state_update::fused, chain_call::closes, epilogue::none{});
  }
  template <class T>
  status close_chain(const T* in, T* out, size_t n, cudaStream_t stream, view_type state) {
    return submit(in, out, n, stream, state, state_update::fused, closing, epilogue::none{});
  }
  template <class T>
  status close_chain(const T* in, T* out, size_t n, cudaStream_t stream, const epilogue::residual_rms_norm<T>& epi,
                     chain_type* ch = nullptr) {
    return chained(in, out, n, stream, ch, state_update::fused, chain_call::closes, epi);
  }
  template <class T>
  status close_chain(const T* in, T* out, size_t n, cudaStream_t stream, const epilogue::residual_rms_norm<T>& epi,
                     view_type state) {
    return submit(in, out, n, stream, state, state_update::fused, closing, epi);
  }
  status close_chain(dtype t, const void* in, void* out, size_t n, cudaStream_t stream, view_type state = {}) {
    return typed(t, in, out, [&](const auto* i, auto* o) {
      return submit(i, o, n, stream, state, state_update::fused, closing, epilogue::none{});
    });
  }
  status close_chain(dtype t, const void* in, void* out, size_t n, cudaStream_t stream,
                     const epilogue::residual_rms_norm<void>& epi, view_type state = {}) {
    return typed(t, in, out, [&](const auto* i, auto* o) {
      return submit(i, o, n, stream, state, state_update::fused, closing, typed_epilogue(epi, o));
    });
  }

  /// The sequence-parallel reduce-scatter (reference/reduce_scatter.cuh): out = this rank's
  /// segment of the sum over ranks of in (n values; rank r's segment is [r m, (r + 1) m) of the
  /// message, m = n / P, the layout in which Megatron-LM shards the sequence), each value quantized
  /// once on its way to its owner and the owner's sum rounded once to T. With a compensator the
  /// chain keeps the send errors (the own segment's are zero). n: P segments of whole quantizer
  /// groups. Below the dispatch size, where a segment is whole granules of 256, the 16-bit path
  /// (quant::none) takes it, as it takes an all-reduce. cuda_ipc. Never throws.
  template <class T>
  status reduce_scatter(const T* in, T* out, size_t n, cudaStream_t stream, chain_type* ch = nullptr) {
    if constexpr (Comp::keeps_state) {
      if (const char* why = chain_error(ch, n)) return fail(why);
      const status s = scatter(in, out, n, stream, ch->view());
      if (s == status::success) ch->clear_pending();
      return s;
    } else {
      (void)ch;
      return scatter(in, out, n, stream, view_type{});
    }
  }
  template <class T>
  status reduce_scatter(const T* in, T* out, size_t n, cudaStream_t stream, view_type state) {
    return scatter(in, out, n, stream, state);
  }
  status reduce_scatter(dtype t, const void* in, void* out, size_t n, cudaStream_t stream, view_type state = {}) {
    return typed(t, in, out, [&](const auto* i, auto* o) { return scatter(i, o, n, stream, state); });
  }

  /// The sequence-parallel all-gather (reference::all_gather<closing_quantizer>): in = this rank's m
  /// values, out = the P segments (P m values, rank r's at [r m, (r + 1) m)), each sent as its
  /// owner's one code and decoded on every rank, the owner's own included, so every rank holds the
  /// same bits. The codes are the closing quantizer's (8 bits, Quant's family, group and transform):
  /// no chain takes back what an all-gather injects (its output is the next GEMM's input, not a
  /// residual stream), so it goes at the precision a chain's last call does (docs/quality.md,
  /// "Training with sequence parallelism": at 4 bits a TP = 2 run diverged). m: whole groups; the
  /// 16-bit path below the dispatch size as for reduce_scatter. cuda_ipc. Never throws.
  template <class T>
  status all_gather(const T* in, T* out, size_t m, cudaStream_t stream) {
    const size_t P = static_cast<size_t>(comm_.size());
    if (m > max_elements_ / P) return fail("m: P m above max_elements");
    return submit_segments(collective::operation::all_gather, in, out, m * P, stream, view_type{});
  }
  status all_gather(dtype t, const void* in, void* out, size_t m, cudaStream_t stream) {
    return typed(t, in, out, [&](const auto* i, auto* o) { return all_gather(i, o, m, stream); });
  }

  /// The deferred half of a state_update::deferred call: same in (unchanged since), n and chain.
  /// Touches only this rank's state (no peer), so it may run on a side stream beside other work,
  /// ordered before the chain's next call. Without a pending deferred call it changes nothing
  /// (and, for an echo::chain, returns invalid_argument).
  template <class T>
  status update(const T* in, size_t n, cudaStream_t stream, chain_type& ch) {
    if constexpr (!Comp::keeps_state) {
      return status::success;
    } else {
      if (!ch.update_pending()) return fail("chain: no deferred call awaits an update()");
      // Refused, not run: the update the chain awaits stays due (on the device, an update of
      // another n or type would find nothing due and change nothing).
      if (n != ch.pending_n()) return fail("n: not the n of the deferred call this update() completes");
      if (element_traits<storage_of_t<T>>::tag != ch.pending_type())
        return fail("in: not the element type of the deferred call this update() completes");
      const status s = update(in, n, stream, ch.view());
      if (s == status::success) ch.clear_pending();
      return s;
    }
  }
  template <class T>
  status update(const T* in, size_t n, cudaStream_t stream, view_type state) {
    using E = storage_of_t<T>;
    static_assert(is_element<E>::value, "echo::all_reduce::update: unsupported element type");
    if constexpr (!Comp::keeps_state) {
      return status::success;
    } else {
      if (poisoned()) return poisoned_status();
      if (n == 0 || comm_.size() == 1) return status::success;
      if (const char* why = check_pointer(in, in_errors)) return fail(why);
      if (n > max_elements_) return fail("n: above max_elements");
      if (const char* why = check_state(state, n)) return fail(why);
      detail::device_guard g(comm_.device());
      // The device checks the chain's header: after a call whose unquantized path keeps no state
      // (cuda_ipc's one-shot, transport::nccl's ncclAllReduce) the update finds nothing pending and
      // changes nothing.
      const auto* e = reinterpret_cast<const E*>(in);
      const status s = n * sizeof(T) < unquantized_below_
                           ? engine_->template run_update<quant::none>(e, n, state.data(), stream)
                           : engine_->template run_update<Quant>(e, n, state.data(), stream);
      if (s != status::success) error_ = engine_->last_error();
      return s;
    }
  }
  status update(dtype t, const void* in, size_t n, cudaStream_t stream, view_type state) {
    switch (t) {
      case dtype::f32: return update(static_cast<const float*>(in), n, stream, state);
      case dtype::f16: return update(static_cast<const half_t*>(in), n, stream, state);
      case dtype::bf16: return update(static_cast<const bfloat16_t*>(in), n, stream, state);
    }
    return fail("dtype: not f32, f16 or bf16");
  }

  /// What a launch reported: status::timeout (a peer did not arrive) or status::mismatch (a rank
  /// made another call), sticky; success otherwise. Reads host-mapped memory: synchronise the
  /// stream first to see a launch's outcome. After either, calls return status::poisoned: the
  /// object must be rebuilt.
  status check() const {
    const int s = engine_ ? engine_->device_status() : 0;
    return s == 0 ? status::success : static_cast<status>(s);
  }

  /// Why the last call that did not return success failed (names the argument).
  const char* last_error() const { return error_; }

  const communicator& comm() const { return comm_; }
  size_t max_elements() const { return max_elements_; }
  size_t workspace_bytes() const { return engine_ ? engine_->workspace_bytes() : 0; }
  size_t unquantized_below_bytes() const { return unquantized_below_; }
  /// State bytes a chain of n elements needs (for caller-owned state: chain_view).
  static size_t state_bytes(size_t n) { return Comp::state_bytes(n); }
  engine_type& engine() { return *engine_; }

 private:
  status fail(const char* why) {
    error_ = why;
    return status::invalid_argument;
  }
  bool poisoned() const { return check() != status::success; }
  status poisoned_status() {
    error_ = "an earlier call timed out, mismatched or failed to launch (see check()); rebuild the object";
    return status::poisoned;
  }
  /// Whether a call is one more of its chain or closes it (close_chain).
  enum class chain_call { continues, closes };
  /// close_chain's kind of call: without state there is no chain to close, and it is the plain call.
  static constexpr chain_call closing = Comp::keeps_state ? chain_call::closes : chain_call::continues;

  /// A CUDA runtime call of the host path failed: its own error, cleared (none left behind).
  status cuda_failed(const char* what) {
    (void)cudaGetLastError();
    error_ = what;
    return status::cuda_error;
  }

  /// A call on an echo::chain (or, without state, on none): the chain's own checks, then submit().
  template <class T, class Epi>
  status chained(const T* in, T* out, size_t n, cudaStream_t stream, chain_type* ch, state_update mode, chain_call end,
                 const Epi& epi) {
    if constexpr (Comp::keeps_state) {
      if (const char* why = chain_error(ch, n)) return fail(why);
      const status s = submit(in, out, n, stream, ch->view(), mode, end, epi);
      if (s == status::success) {
        if (mode == state_update::deferred) ch->mark_pending(n, element_traits<storage_of_t<T>>::tag);
        else ch->clear_pending();
      }
      return s;
    } else {
      (void)end;  // without state, close_chain is the plain call
      return submit(in, out, n, stream, view_type{}, mode, chain_call::continues, epi);
    }
  }

  /// f(in, out) with the pointers cast to the element type t names.
  template <class F>
  status typed(dtype t, const void* in, void* out, F&& f) {
    switch (t) {
      case dtype::f32: return f(static_cast<const float*>(in), static_cast<float*>(out));
      case dtype::f16: return f(static_cast<const half_t*>(in), static_cast<half_t*>(out));
      case dtype::bf16: return f(static_cast<const bfloat16_t*>(in), static_cast<bfloat16_t*>(out));
    }
    return fail("dtype: not f32, f16 or bf16");
  }
  template <class T>
  static epilogue::residual_rms_norm<T> typed_epilogue(const epilogue::residual_rms_norm<void>& e, const T*) {
    return {static_cast<T*>(e.residual), static_cast<const T*>(e.weight), e.hidden, e.epsilon};
  }

  /// Whether [a, a + na) and [b, b + nb) share a byte (never with a null b: an absent chain state).
  static bool overlap(const void* a, size_t na, const void* b, size_t nb) {
    const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
    return b && x < y + nb && y < x + na;
  }

  /// The epilogue's arguments checked and made plain data for the kernels (null: fine).
  template <class E, class Epi>
  const char* make_job(const Epi& epi, size_t n, const E* in, const E* out, const unsigned char* state,
                       epilogue::job<E>& job) {
    if constexpr (std::is_same<Epi, epilogue::none>::value) {
      (void)epi, (void)n, (void)in, (void)out, (void)state, (void)job;
      return nullptr;
    } else {
      if (const char* why = epilogue::argument_error(epi, n)) return why;
      auto* res = reinterpret_cast<E*>(epi.residual);
      const auto* w = reinterpret_cast<const E*>(epi.weight);
      if (const char* why = check_pointer(res, residual_errors)) return why;
      if (const char* why = check_pointer(w, weight_errors)) return why;
      const size_t bytes = n * sizeof(E), wbytes = epi.hidden * sizeof(E);
      if (overlap(res, bytes, in, bytes) || overlap(res, bytes, out, bytes))
        return "epilogue.residual: overlaps in or out";
      if (overlap(res, bytes, state, Comp::state_bytes(n))) return "epilogue.residual: overlaps the chain's state";
      if (overlap(w, wbytes, out, bytes) || overlap(w, wbytes, res, bytes))
        return "epilogue.weight: overlaps out or the residual";
      if (overlap(w, wbytes, state, Comp::state_bytes(n))) return "epilogue.weight: overlaps the chain's state";
      job = {epilogue::kind::residual_rms_norm, res, w, static_cast<uint32_t>(epi.hidden), epi.epsilon};
      return nullptr;
    }
  }

  template <class T>
  status scatter(const T* in, T* out, size_t n, cudaStream_t stream, view_type state) {
    static_assert(!comp::stores_in_data_steps<Comp>::value,
                  "echo::all_reduce::reduce_scatter: the owner's segment, never quantized, keeps no error, so a state "
                  "stored in units of the data group's step (step8_state, step4_state) has no step there: use int8_state, "
                  "int4_state, bfloat16_t or float");
    return submit_segments(collective::operation::reduce_scatter, in, out, n, stream, state);
  }

  /// What is wrong with an echo::chain for a call of n (null: nothing).
  const char* chain_error(const chain_type* ch, size_t n) const {
    if (!ch) return "chain: this compensator needs a chain (echo::chain or a chain_view)";
    if (ch->update_pending()) return "chain: the last call on it was deferred and its update() has not run";
    if (ch->capacity() < n) return "chain: capacity below n";
    return nullptr;
  }

  /// A reduce-scatter or all-gather of a message of n values (collective/operation.cuh).
  template <class T>
  status submit_segments(collective::operation op, const T* in_t, T* out_t, size_t n, cudaStream_t stream,
                         view_type state) {
    using E = storage_of_t<T>;
    static_assert(is_element<E>::value, "echo::all_reduce: unsupported element type");
    static_assert(Ops::sequence_parallel,
                  "echo::all_reduce: reduce_scatter and all_gather need an object that serves them: "
                  "echo::sequence_parallel<Quant, transport::cuda_ipc::tag, Comp> (their kernels are built and loaded "
                  "with the object)");
    const bool scatter = op == collective::operation::reduce_scatter;
    const auto* in = reinterpret_cast<const E*>(in_t);
    auto* out = reinterpret_cast<E*>(out_t);
    if (poisoned()) return poisoned_status();
    if (n == 0) return status::success;
    if (n > max_elements_) return fail("n: above max_elements");
    if (const char* why = reference::segment_error<Quant>(n, comm_.size())) return fail(why);
    const size_t P = static_cast<size_t>(comm_.size()), m = n / P;
    if (const char* why = check_pointer(in, in_errors)) return fail(why);
    if (const char* why = check_pointer(out, out_errors)) return fail(why);
    const size_t in_bytes = (scatter ? n : m) * sizeof(E), out_bytes = (scatter ? m : n) * sizeof(E);
    if (overlap(in, in_bytes, out, out_bytes)) return fail("in, out: overlap (reduce_scatter and all_gather take neither in place)");
    unsigned char* chain_state = nullptr;  // the all-gather keeps none
    if constexpr (Comp::keeps_state) {
      if (scatter) {
        if (const char* why = check_state(state, n)) return fail(why);
        const size_t sb = Comp::state_bytes(n);
        if (overlap(state.data(), sb, in, in_bytes) || overlap(state.data(), sb, out, out_bytes))
          return fail("chain: state overlaps in or out");
        chain_state = state.data();
      }
    }
    detail::device_guard g(comm_.device());
    if (P == 1) {
      if (cudaMemcpyAsync(out, in, n * sizeof(E), cudaMemcpyDefault, stream) != cudaSuccess)
        return cuda_failed("cudaMemcpyAsync (P = 1: out = in)");
      return status::success;
    }
    // The 16-bit path cuts the message into granules of 256: only where that gives the same segments.
    const bool unquantized = n * sizeof(E) < unquantized_below_ && m % detail::granule_of<quant::none>() == 0;
    // the all-gather goes through the closing quantizer (all_gather's comment says why)
    const bool closing_codes = !scatter;
    collective::call_args<E> c{in, out, n, chain_state, state_update::fused, 0, is_capturing(stream),
                               closing_codes, {}, op};
    c.sig = call_signature<E>(n, unquantized, closing_codes, c.epilogue, op);
    return dispatch(c, stream, unquantized);
  }

  template <class T, class Epi>
  status submit(const T* in_t, T* out_t, size_t n, cudaStream_t stream, view_type state, state_update mode,
                chain_call end, const Epi& epi) {
    using E = storage_of_t<T>;
    static_assert(is_element<E>::value, "echo::all_reduce: unsupported element type");
    const bool closes = end == chain_call::closes;
    const auto* in = reinterpret_cast<const E*>(in_t);
    auto* out = reinterpret_cast<E*>(out_t);
    if (poisoned()) return poisoned_status();
    if (n == 0) return status::success;
    if (n > max_elements_) return fail("n: above max_elements");
    if (const char* why = check_pointer(in, in_errors)) return fail(why);
    if (const char* why = check_pointer(out, out_errors)) return fail(why);
    const size_t bytes = n * sizeof(E);
    const auto a = reinterpret_cast<uintptr_t>(in), b = reinterpret_cast<uintptr_t>(out);
    if (a != b && a < b + bytes && b < a + bytes) return fail("in, out: overlap without being equal");
    if constexpr (Comp::keeps_state) {
      if (const char* why = check_state(state, n)) return fail(why);
      const auto s = reinterpret_cast<uintptr_t>(state.data());
      const size_t sb = Comp::state_bytes(n);
      if ((s < a + bytes && a < s + sb) || (s < b + bytes && b < s + sb)) return fail("chain: state overlaps in or out");
      if (mode == state_update::deferred && a == b) return fail("mode: deferred needs in != out (update() re-reads in)");
    }
    epilogue::job<E> job{};
    if (const char* why = make_job(epi, n, in, out, Comp::keeps_state ? state.data() : nullptr, job)) return fail(why);
    detail::device_guard g(comm_.device());
    if (comm_.size() == 1) {
      if (in != out && cudaMemcpyAsync(out, in, bytes, cudaMemcpyDefault, stream) != cudaSuccess)
        return cuda_failed("cudaMemcpyAsync (P = 1: out = in)");
      if (job.active() && epilogue::launch_epilogue<epilogue::sum_at::out>(job, out, n, sms_, stream, false) != cudaSuccess)
        return cuda_failed("the epilogue's launch (P = 1)");
      return status::success;
    }
    const bool unquantized = bytes < unquantized_below_;
    collective::call_args<E> c{in,       out,    n,  Comp::keeps_state ? state.data() : nullptr, mode,
                          call_signature<E>(n, unquantized, closes, job), is_capturing(stream), closes, job};
    return dispatch(c, stream, unquantized);
  }

  /// A checked call to its engine, ordered after the object's last call (made on another stream).
  template <class E>
  status dispatch(const collective::call_args<E>& c, cudaStream_t stream, bool unquantized) {
    if (!c.capturing && last_stream_ != stream && calls_ > 0 && cudaStreamWaitEvent(stream, done_, 0) != cudaSuccess)
      return cuda_failed("cudaStreamWaitEvent (ordering the call after the last one, made on another stream)");
    status s = status::success;
    if (unquantized) s = engine_->run_unquantized(c, stream);
    else if (c.closes) s = engine_->template run_closing<closing_quantizer>(c, stream);
    else s = engine_->template run<Quant>(c, stream);
    if (s != status::success) {
      error_ = engine_->last_error();
      return s;
    }
    if (!c.capturing) {
      if (cudaEventRecord(done_, stream) != cudaSuccess) return cuda_failed("cudaEventRecord (the call's completion)");
      last_stream_ = stream;
      ++calls_;
    }
    return status::success;
  }

  /// Signature of a call: what every rank must agree on (the transport adds its plan).
  template <class E>
  uint32_t call_signature(size_t n, bool unquantized, bool closes, const epilogue::job<E>& job,
                          collective::operation op = collective::operation::all_reduce) const {
    uint32_t eps = 0;
    std::memcpy(&eps, &job.epsilon, sizeof eps);
    return detail::signature()
        .add(n)
        .add(static_cast<uint64_t>(op))
        .add(static_cast<uint64_t>(element_traits<E>::tag))
        .add(unquantized ? 0u : closes ? 2u : 1u)
        .add(static_cast<uint64_t>(job.what))
        .add(job.hidden)
        .add(eps)
        .add(config_signature_)
        .value();
  }

  static bool is_capturing(cudaStream_t stream) {
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &st) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    return st != cudaStreamCaptureStatusNone;
  }

  const char* check_state(view_type state, size_t n) {
    if (!state.fits(n)) return "chain: null or smaller than state_bytes(n)";
    if (state.device() != comm_.device()) return "chain: on another device than the rank's";
    return check_pointer(state.data(), chain_errors);
  }

  /// What check_pointer says about one argument (static strings: last_error() returns them), and
  /// whether pinned host memory serves (in and out: the kernels read and write it over the bus;
  /// a chain's state takes device atomics, which host memory does not promise).
  struct pointer_errors {
    const char* null;
    const char* misaligned;
    const char* foreign;
    bool host_ok;
  };
  static constexpr pointer_errors in_errors{"in: null", "in: not 16-byte aligned",
                                            "in: neither device memory of this rank's GPU nor pinned host memory", true};
  static constexpr pointer_errors out_errors{"out: null", "out: not 16-byte aligned",
                                             "out: neither device memory of this rank's GPU nor pinned host memory", true};
  static constexpr pointer_errors residual_errors{
      "epilogue.residual: null", "epilogue.residual: not 16-byte aligned",
      "epilogue.residual: neither device memory of this rank's GPU nor pinned host memory", true};
  static constexpr pointer_errors weight_errors{"epilogue.weight: null", "epilogue.weight: not 16-byte aligned",
                                                "epilogue.weight: neither device memory of this rank's GPU nor pinned host memory",
                                                true};
  static constexpr pointer_errors chain_errors{"chain: null", "chain: not 16-byte aligned",
                                               "chain: not device memory of this rank's GPU", false};

  /// Null, misaligned, or memory this rank's GPU cannot address as its own: refused (pageable
  /// host memory would read as an illegal address inside the kernel and poison the context).
  /// Accepted: device memory of this GPU, managed memory, and for in / out pinned host memory
  /// that the device addresses at the same pointer (cudaMallocHost, cudaHostRegister: slow, over
  /// the bus, but right). The last few pointers that passed are remembered, so a loop over the
  /// same buffers asks the driver once.
  const char* check_pointer(const void* p, const pointer_errors& e) {
    if (!p) return e.null;
    if (reinterpret_cast<uintptr_t>(p) & 15u) return e.misaligned;
    if (!opt_.check_pointers) return nullptr;
    const bool host_ok = e.host_ok;
    for (const seen_pointer& q : seen_)
      if (q.p == p && (host_ok || !q.host)) return nullptr;
    cudaPointerAttributes attr{};
    const cudaError_t err = cudaPointerGetAttributes(&attr, p);
    (void)cudaGetLastError();
    if (err != cudaSuccess) return e.foreign;
    const bool device = (attr.type == cudaMemoryTypeDevice && attr.device == comm_.device()) || attr.type == cudaMemoryTypeManaged;
    const bool host = attr.type == cudaMemoryTypeHost && attr.devicePointer == p;
    if (!(device || (host_ok && host))) return e.foreign;
    seen_[seen_next_++ % seen_count] = {p, host};
    return nullptr;
  }

  /// What of a pipeline policy decides the kernels' work split (so it must agree on every rank).
  template <class W>
  static std::array<int, 5> policy_shape() {
    return {W::threads, W::blocks_per_sm, W::flag_elems, W::stage_lag, W::lane_values};
  }

  // Collective: throws on every rank or on none. A step that fails on one rank only (a bad
  // argument, a refused allocation) is held to the next exchange (detail/collective_setup.cuh):
  // a rank that threw alone would leave its peers waiting there.
  void build() {
    detail::collective_setup setup(comm_, "echo::all_reduce");
    setup.local([&] {
      if (const char* bad = argument_error(max_elements_, opt_)) throw echo::error("echo::all_reduce", bad, __FILE__, __LINE__);
    });
    check_configuration(setup);
    engine_ = std::make_unique<engine_type>(comm_, max_elements_, opt_);  // collective itself
    setup.local([&] {
      const tuning::dispatch_sizes d = engine_->dispatch(comm_.size()).sizes;
      ECHO_CUDA_TRY(cudaDeviceGetAttribute(&sms_, cudaDevAttrMultiProcessorCount, comm_.device()));
      unquantized_below_ = opt_.unquantized_below_bytes.value_or(d.unquantized_below);
      ECHO_CUDA_TRY(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
    });
    setup.agree();
  }

  /// What is wrong with the constructor's arguments (null: nothing).
  static const char* argument_error(size_t max_elements, const options& opt) {
    if (max_elements == 0) return "max_elements must be > 0";
    if (max_elements > comp::state_header::max_n) return "max_elements must be below 2^56";
    if (!(std::isfinite(opt.spin_limit_seconds) && opt.spin_limit_seconds > 0 && opt.spin_limit_seconds <= 86400))
      return "options.spin_limit_seconds must be in (0, 86400]";
    // A size above 2^62 bytes is a negative count converted (the -1 that meant "the table's"
    // before these options were std::optional): leave it unset for the table's.
    if (opt.unquantized_below_bytes && *opt.unquantized_below_bytes > (size_t(1) << 62))
      return "options.unquantized_below_bytes is above 2^62 (a negative number converted?); leave it unset for the "
             "dispatch table's size";
    return nullptr;
  }

  /// Every rank must have built the same object: compare what each rank built (collective; a
  /// rank whose own arguments were bad is reported by the exchange, on every rank).
  void check_configuration(detail::collective_setup& setup) {
    // The transport's own options (cuda_ipc's tiers) are its engine's to agree on.
    struct record {
      uint64_t config;
      uint64_t max_elements;
      uint64_t workspace_bytes;
      uint64_t unquantized_below;  // 0 where unset
      uint64_t unquantized_below_set;
    };
    detail::signature s;
    s.add(Quant::name).add(static_cast<uint64_t>(Quant::bits)).add(static_cast<uint64_t>(Quant::group));
    if constexpr (quant::transform_of_t<Quant>::active) s.add(quant::transform_of_t<Quant>::name);
    s.add(static_cast<uint64_t>(quant::clip_of<Quant>::ratio_1024));
    s.add(Comp::name);
    if constexpr (Comp::keeps_state) s.add(comp::state_storage<typename Comp::storage>::name);
    s.add(Transport::name);
    for (const auto& w : {policy_shape<Policy>(), policy_shape<tuning::wide_policy_t<Policy, Quant, Comp>>(),
                          policy_shape<tuning::wide_policy_t<Policy, quant::none, Comp>>(),
                          policy_shape<tuning::mid_policy_t<Policy, Quant, Comp>>()})
      for (const int v : w) s.add(static_cast<uint64_t>(v));
    config_signature_ = s.wide();
    const record mine{config_signature_,
                      max_elements_,
                      opt_.workspace_bytes,
                      opt_.unquantized_below_bytes.value_or(0),
                      opt_.unquantized_below_bytes.has_value()};
    const std::vector<record> all = setup.all_gather(mine);
    for (size_t r = 0; r < all.size(); ++r) {
      const std::string who = "rank " + std::to_string(r) + " and rank " + std::to_string(comm_.rank()) + " ";
      ECHO_REQUIRE(all[r].config == mine.config, "echo::all_reduce",
                   who + "were built with different quantizer, compensator, transport or policy");
      ECHO_REQUIRE(all[r].max_elements == mine.max_elements, "echo::all_reduce", who + "were built with different max_elements");
      ECHO_REQUIRE(all[r].workspace_bytes == mine.workspace_bytes, "echo::all_reduce",
                   who + "were built with different options.workspace_bytes");
      ECHO_REQUIRE(all[r].unquantized_below == mine.unquantized_below &&
                       all[r].unquantized_below_set == mine.unquantized_below_set,
                   "echo::all_reduce",
                   who + "were built with different options.unquantized_below_bytes");
    }
  }

  static constexpr size_t seen_count = 8;

  communicator comm_;
  size_t max_elements_;
  options opt_;
  size_t unquantized_below_ = 0;
  int sms_ = 1;  ///< the device's SMs: the P = 1 epilogue's grid
  uint64_t config_signature_ = 0;
  std::unique_ptr<engine_type> engine_;
  cudaEvent_t done_ = nullptr;       // the last call's completion (orders calls made on other streams)
  cudaStream_t last_stream_ = nullptr;
  uint64_t calls_ = 0;
  struct seen_pointer {
    const void* p;
    bool host;  ///< pinned host memory: fine for in and out, not for a chain
  };
  seen_pointer seen_[seen_count] = {};
  size_t seen_next_ = 0;
  const char* error_ = "";
};

}  // namespace echo
