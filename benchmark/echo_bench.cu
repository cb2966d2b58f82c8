// echo_bench's variant table: what it measures against NCCL's bf16 all-reduce, one line each.
// The harness (harness/bench_main.cu: setup, timing, sizes, Google Benchmark, the summary) says
// how; `echo_bench --help` lists Google Benchmark's flags, harness/bench_main.cu the environment.
//
//   nccl               ncclAllReduce(bf16, sum) on every rank inside ncclGroupStart/End
//   nccl_threads       the same from each rank's own thread, as transport::nccl's runners issue
//                      their calls (the like-for-like baseline of its ncclAllReduce path)
//   echo_none          echo::all_reduce<quant::none>: the unquantized two-shot through Echo's pipeline
//   echo_int4          zero_aware<4,128>, comp::none
//   echo_int4_ef       zero_aware<4,128>, error_feedback<> (default state: comp::step8_state, the
//                      error in units of its data group's step, 8 bits), fused state update, one
//                      chain a rank
//   echo_int4_ef16     the same with the state as bf16 (the former default)
//   echo_int4_ef8      the same with the state as int8 codes of their own step (comp::int8_state)
//   echo_int4_ef4      the same with int4 codes; echo_int4_efs4: comp::step4_state
//   echo_int4_ef_lean  the default state under the lean policy's shape (2 blocks of 256 a SM,
//                      128 registers, 32 values a lane) with the L2 prefetch, at every size: does
//                      the heavy policy's register cap still pay?
//   echo_int8          zero_aware<8,128>, comp::none
//   echo_int8_ef       zero_aware<8,128>, error_feedback<> (step8 state); echo_int8_ef16: bf16
//   echo_dispatch      zero_aware<4,128>, error_feedback<>, default options: the size dispatch of
//                      echo::tuning::dispatch_table (what a user gets)
//   echo_dispatch_nocheck  the same with options::check_pointers off: what the pointer check costs
//                      a call in steady state (the header line "pointer check" gives the cost of
//                      the driver query it makes for a pointer it has not seen)
//   echo_dispatch_threads  echo_dispatch with each rank's calls from its own thread (compare with
//                      nccl_threads); echo_dispatch_c0_threads: the same without compensation
//   echo_nccl_int4     zero_aware<4,128>, comp::none, over echo::transport::nccl (ncclSend/ncclRecv)
//   echo_nccl_int4_ef  zero_aware<4,128>, error_feedback<>, transport::nccl
//   echo_nccl_int8     zero_aware<8,128>, comp::none, transport::nccl
//   echo_nccl_dispatch zero_aware<4,128>, error_feedback<>, transport::nccl, default options
//                      (ncclAllReduce below the dispatch size)
//   echo_int4_*        zero_aware<4,128> (echo_none_*: the 16-bit pipeline) under another
//                      pipeline_policy or workspace: tuning
//                      ablations, identical results (t<threads>x<blocks a SM>, v32: 32 values a
//                      lane, f<values a flag>, lag2: stages two iterations apart, w<workspace MiB>;
//                      the t<T>x<B> policies overlap the stages (lag 1) and cover 8192 values a
//                      flag unless named l0: the default's phase schedule and 4096 a flag)
//   echo_int4_pf0      the lean wide policy without asking L2 for its input one sub-tile ahead
//                      (pipeline_policy::prefetch; the default's asks); echo_int4_pf2: two
//                      sub-tiles ahead; echo_int4_ef_t256x3: the heavy one without it (other
//                      variants, of prefetch, tile size and warps, are in commit 24cd9f8;
//                      docs/benchmarks.md)
//   echo_*_narrow / echo_*_mid / echo_*_wide  the default policy's three tiers, each at every
//                      size (the default runs the mid one from the dispatch table's mid_from size
//                      on, the wide one from its wide size on)
// The echo_* variants without "nccl" in the name use transport::cuda_ipc (peer stores over
// NVLink / PCIe, never through NCCL). Every echo_* variant but the *dispatch ones forces its path
// (the quantizer at every size).
#include "harness/bench_main.cuh"
#include "harness/echo_runner.cuh"
#include "harness/nccl_runner.cuh"

namespace echo_bench {
namespace {

using za4 = echo::quant::zero_aware<4, 128>;
using za8 = echo::quant::zero_aware<8, 128>;
using q16 = echo::quant::none;
using c0 = echo::comp::none;
using ef = echo::comp::error_feedback<>;
using ef4 = echo::comp::error_feedback<echo::comp::int4_state>;
using ef8 = echo::comp::error_feedback<echo::comp::int8_state>;
using ef16 = echo::comp::error_feedback<echo::bfloat16_t>;
using efs4 = echo::comp::error_feedback<echo::comp::step4_state>;
using ipc = echo::transport::cuda_ipc::tag;
using nccl_transport = echo::transport::nccl::tag;
using default_policy = echo::tuning::default_policy;
template <int Threads, int Blocks, int FlagElems = 8192, int LaneValues = 16, int Lag = 1>
using policy = echo::tuning::pipeline_policy<Threads, Blocks, FlagElems, LaneValues, Lag>;
/// A policy whose warps ask L2 for the input Prefetch sub-tiles ahead (pipeline_policy::prefetch).
template <int Threads, int Blocks, int LaneValues, int Prefetch, int Lag = 1, int FlagElems = 8192>
using prefetching = echo::tuning::pipeline_policy<Threads, Blocks, FlagElems, LaneValues, Lag, void, Prefetch>;
/// The default policy's parts, each alone at every size: its narrow policy, and the mid and wide
/// policies each configuration gets (tuning::wide_policy_t: lean for 4-bit without state,
/// stateful for 4-bit with error feedback (the heavy policies by default), heavy for 8-bit, plain
/// for the 16-bit pipeline without state).
using narrow = echo::tuning::pipeline_policy<>;
template <class Q, class C>
using wide = echo::tuning::wide_policy_t<default_policy, Q, C>;
template <class Q, class C>
using mid = echo::tuning::mid_policy_t<default_policy, Q, C>;
constexpr bool dispatched = false;

std::unique_ptr<runner> make_nccl(bench_context& ctx) { return std::make_unique<nccl_runner>(ctx, ncclBfloat16); }
std::unique_ptr<runner> make_nccl_threads(bench_context& ctx) {
  return std::make_unique<nccl_runner>(ctx, ncclBfloat16, true);
}

/// echo::all_reduce<Q, Transport, C, Policy> on bf16 (WorkspaceMiB 0: the library's default).
template <class Q, class C, bool Forced = true, class Transport = ipc, class Policy = default_policy,
          size_t WorkspaceMiB = 0, bool CheckPointers = true, bool Threads = false>
std::unique_ptr<runner> make_echo(bench_context& ctx) {
  echo_runner_options o = runner_options(Forced);
  if (WorkspaceMiB) o.workspace_bytes = WorkspaceMiB << 20;
  o.check_pointers = CheckPointers;
  o.threads = Threads;
  return std::make_unique<echo_runner<Q, C, echo::bfloat16_t, Transport, Policy>>(ctx, o);
}

}  // namespace

const std::vector<variant_spec>& variants() {
  static const std::vector<variant_spec> table = {
      {"nccl", make_nccl},
      {"nccl_threads", make_nccl_threads},
      {"echo_none", make_echo<q16, c0>},
      {"echo_int4", make_echo<za4, c0>},
      {"echo_int4_ef", make_echo<za4, ef>},
      {"echo_int4_ef8", make_echo<za4, ef8>},
      {"echo_int4_ef4", make_echo<za4, ef4>},
      {"echo_int4_ef16", make_echo<za4, ef16>},
      {"echo_int4_efs4", make_echo<za4, efs4>},
      {"echo_int4_ef_lean", make_echo<za4, ef, true, ipc, prefetching<256, 2, 32, 1, 1, 16384>>},
      {"echo_int8", make_echo<za8, c0>},
      {"echo_int8_ef", make_echo<za8, ef>},
      {"echo_int8_ef16", make_echo<za8, ef16>},
      {"echo_dispatch", make_echo<za4, ef, dispatched>},
      {"echo_dispatch_nocheck", make_echo<za4, ef, dispatched, ipc, default_policy, 0, false>},
      {"echo_dispatch_threads", make_echo<za4, ef, dispatched, ipc, default_policy, 0, true, true>},
      {"echo_dispatch_c0_threads", make_echo<za4, c0, dispatched, ipc, default_policy, 0, true, true>},
      {"echo_nccl_int4", make_echo<za4, c0, true, nccl_transport>},
      {"echo_nccl_int4_ef", make_echo<za4, ef, true, nccl_transport>},
      {"echo_nccl_int8", make_echo<za8, c0, true, nccl_transport>},
      {"echo_nccl_dispatch", make_echo<za4, ef, dispatched, nccl_transport>},
      {"echo_int4_t512x1", make_echo<za4, c0, true, ipc, policy<512, 1>>},
      {"echo_int4_v32", make_echo<za4, c0, true, ipc, policy<256, 2, 8192, 32>>},
      {"echo_int4_ef_v32", make_echo<za4, ef, true, ipc, policy<256, 2, 8192, 32>>},
      {"echo_int8_v32", make_echo<za8, c0, true, ipc, policy<256, 2, 8192, 32>>},
      {"echo_int8_ef_v32", make_echo<za8, ef, true, ipc, policy<256, 2, 8192, 32>>},
      {"echo_none_v32", make_echo<q16, c0, true, ipc, policy<256, 2, 8192, 32>>},
      {"echo_int4_lag2", make_echo<za4, c0, true, ipc, policy<256, 2, 8192, 16, 2>, 256>},
      {"echo_int4_narrow", make_echo<za4, c0, true, ipc, narrow>},
      {"echo_int4_mid", make_echo<za4, c0, true, ipc, mid<za4, c0>>},
      {"echo_int4_ef_mid", make_echo<za4, ef, true, ipc, mid<za4, ef>>},
      {"echo_int8_mid", make_echo<za8, c0, true, ipc, mid<za8, c0>>},
      {"echo_int4_wide", make_echo<za4, c0, true, ipc, wide<za4, c0>>},
      {"echo_int4_ef_narrow", make_echo<za4, ef, true, ipc, narrow>},
      {"echo_int4_ef_wide", make_echo<za4, ef, true, ipc, wide<za4, ef>>},
      {"echo_int8_narrow", make_echo<za8, c0, true, ipc, narrow>},
      {"echo_int8_wide", make_echo<za8, c0, true, ipc, wide<za8, c0>>},
      {"echo_int8_ef_narrow", make_echo<za8, ef, true, ipc, narrow>},
      {"echo_int8_ef_wide", make_echo<za8, ef, true, ipc, wide<za8, ef>>},
      {"echo_none_narrow", make_echo<q16, c0, true, ipc, narrow>},
      {"echo_none_wide", make_echo<q16, c0, true, ipc, wide<q16, c0>>},
      {"echo_int4_t256x2l1", make_echo<za4, c0, true, ipc, policy<256, 2>>},
      {"echo_int4_t256x3l0", make_echo<za4, c0, true, ipc, policy<256, 3, 4096, 16, 0>>},
      {"echo_int4_ef_t256x3l0", make_echo<za4, ef, true, ipc, policy<256, 3, 4096, 16, 0>>},
      {"echo_none_t256x3l0", make_echo<q16, c0, true, ipc, policy<256, 3, 4096, 16, 0>>},
      {"echo_int4_f4096", make_echo<za4, c0, true, ipc, policy<256, 2, 4096>>},
      {"echo_int4_f16384", make_echo<za4, c0, true, ipc, policy<256, 2, 16384>>},
      {"echo_int4_w16", make_echo<za4, c0, true, ipc, default_policy, 16>},
      {"echo_int4_pf0", make_echo<za4, c0, true, ipc, prefetching<256, 2, 32, 0, 1, 16384>>},
      {"echo_int4_pf2", make_echo<za4, c0, true, ipc, prefetching<256, 2, 32, 2, 1, 16384>>},
      {"echo_int4_ef_t256x3", make_echo<za4, ef, true, ipc, policy<256, 3>>},
      {"echo_none_t256x3", make_echo<q16, c0, true, ipc, policy<256, 3>>},
  };
  return table;
}

}  // namespace echo_bench
