// echo_bench's variant table: what it measures against NCCL's bf16 all-reduce, one line each.
// The harness (harness/bench_main.cu: setup, timing, sizes, Google Benchmark, the summary) says
// how; `echo_bench --help` lists Google Benchmark's flags, harness/bench_main.cu the environment.
//
//   nccl              ncclAllReduce(bf16, sum) on every rank inside ncclGroupStart/End
//   echo_none16       echo::all_reduce<quant::none>: the 16-bit path through Echo's pipeline
//   echo_int4         zero_aware<4,128>, comp::none
//   echo_int4_ef      zero_aware<4,128>, error_feedback<bfloat16_t>, fused state update, one chain a rank
//   echo_int4_ef32    zero_aware<4,128>, error_feedback<float>
//   echo_int8         zero_aware<8,128>, comp::none
//   echo_int8_ef      zero_aware<8,128>, error_feedback<bfloat16_t>
//   echo_dispatch     zero_aware<4,128> with default options: the size dispatch of echo::dispatch_table
//                     (what a user gets).
//   echo_nccl_int4    zero_aware<4,128>, comp::none, over echo::transport::nccl (ncclSend/ncclRecv)
//   echo_nccl_int4_ef zero_aware<4,128>, error_feedback<bfloat16_t>, transport::nccl, one chain a rank
//   echo_nccl_int8    zero_aware<8,128>, comp::none, transport::nccl
//   echo_int4_t*x*    zero_aware<4,128> under another pipeline_policy (threads x blocks per SM):
//                     a tuning ablation, identical results
// The echo_* variants without "nccl" in the name use transport::cuda_ipc (peer loads over
// NVLink / PCIe, never through NCCL). Every echo_* variant except echo_dispatch forces its path
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
using ef16 = echo::comp::error_feedback<echo::bfloat16_t>;
using ef32 = echo::comp::error_feedback<float>;
using nccl_transport = echo::transport::nccl;
template <int Threads, int Blocks>
using policy = echo::collective::pipeline_policy<Threads, Blocks, 4096>;
constexpr bool dispatched = false;

std::unique_ptr<runner> make_nccl(bench_context& ctx) { return std::make_unique<nccl_runner>(ctx, ncclBfloat16); }

/// echo::all_reduce<Q, Transport, C, Policy> on bf16.
template <class Q, class C, bool Forced = true, class Transport = echo::transport::cuda_ipc,
          class Policy = echo::collective::default_policy>
std::unique_ptr<runner> make_echo(bench_context& ctx) {
  return std::make_unique<echo_runner<Q, C, echo::bfloat16_t, Transport, Policy>>(ctx, runner_options(Forced));
}

}  // namespace

const std::vector<variant_spec>& variants() {
  static const std::vector<variant_spec> table = {
      {"nccl", make_nccl},
      {"echo_none16", make_echo<q16, c0>},
      {"echo_int4", make_echo<za4, c0>},
      {"echo_int4_ef", make_echo<za4, ef16>},
      {"echo_int4_ef32", make_echo<za4, ef32>},
      {"echo_int8", make_echo<za8, c0>},
      {"echo_int8_ef", make_echo<za8, ef16>},
      {"echo_dispatch", make_echo<za4, c0, dispatched>},
      {"echo_nccl_int4", make_echo<za4, c0, true, nccl_transport>},
      {"echo_nccl_int4_ef", make_echo<za4, ef16, true, nccl_transport>},
      {"echo_nccl_int8", make_echo<za8, c0, true, nccl_transport>},
      {"echo_int4_t512x1", make_echo<za4, c0, true, echo::transport::cuda_ipc, policy<512, 1>>},
      {"echo_int4_t256x2", make_echo<za4, c0, true, echo::transport::cuda_ipc, policy<256, 2>>},
  };
  return table;
}

}  // namespace echo_bench
