// echo-perf's compiled instantiations (instances.cuh lists them). One translation unit: only one
// may include echo/all_reduce.cuh today (see harness/echo_runner.cuh).
#include "../harness/echo_runner.cuh"
#include "instances.cuh"

namespace echo_perf {
namespace {

/// The compensator x transport x element type instantiations of quantizer Q.
template <class Q>
std::unique_ptr<runner> make_for(bench_context& ctx, const config& c, const echo_runner_options& o) {
  return echo::dispatch_dtype(c.type, [&](auto tag) -> std::unique_ptr<runner> {
    using T = decltype(tag);
    using ef = echo::comp::error_feedback<>;  // the default state (step8)
    using ipc = echo::transport::cuda_ipc::tag;
    using nccl = echo::transport::nccl::tag;
    const bool with_ef = c.comp == comp_kind::error_feedback;
    if (c.transport == transport_kind::cuda_ipc) {
      if (with_ef) return std::make_unique<echo_bench::echo_runner<Q, ef, T, ipc>>(ctx, o);
      return std::make_unique<echo_bench::echo_runner<Q, echo::comp::none, T, ipc>>(ctx, o);
    }
    if (with_ef) return std::make_unique<echo_bench::echo_runner<Q, ef, T, nccl>>(ctx, o);
    return std::make_unique<echo_bench::echo_runner<Q, echo::comp::none, T, nccl>>(ctx, o);
  });
}

/// The outlier-robust quantizers: cuda_ipc and bf16 only (the cost of the transform and the clip,
/// against zero_aware<4, 128> on the same path), with the compensator Ef for -c error_feedback;
/// factory_of refuses other transports and types.
template <class Q, class Ef>
std::unique_ptr<runner> make_lean(bench_context& ctx, const config& c, const echo_runner_options& o) {
  using ipc = echo::transport::cuda_ipc::tag;
  if (c.comp == comp_kind::error_feedback) return std::make_unique<echo_bench::echo_runner<Q, Ef, echo::bfloat16_t, ipc>>(ctx, o);
  return std::make_unique<echo_bench::echo_runner<Q, echo::comp::none, echo::bfloat16_t, ipc>>(ctx, o);
}

}  // namespace

std::unique_ptr<runner> make_rotated_4(bench_context& ctx, const config& c, const echo_runner_options& o) {
  return make_lean<echo::quant::rotated<echo::quant::zero_aware<4, 128>>, echo::comp::error_feedback<>>(ctx, c, o);
}
std::unique_ptr<runner> make_default_4(bench_context& ctx, const config& c, const echo_runner_options& o) {
  return make_lean<echo::default_quantizer, echo::default_compensator>(ctx, c, o);
}
std::unique_ptr<runner> make_zero_aware_4(bench_context& ctx, const config& c, const echo_runner_options& o) {
  return make_for<echo::quant::zero_aware<4, 128>>(ctx, c, o);
}
std::unique_ptr<runner> make_zero_aware_8(bench_context& ctx, const config& c, const echo_runner_options& o) {
  return make_for<echo::quant::zero_aware<8, 128>>(ctx, c, o);
}
std::unique_ptr<runner> make_symmetric_4(bench_context& ctx, const config& c, const echo_runner_options& o) {
  return make_for<echo::quant::symmetric<4, 128>>(ctx, c, o);
}
std::unique_ptr<runner> make_naive_zero_point_4(bench_context& ctx, const config& c, const echo_runner_options& o) {
  return make_for<echo::quant::naive_zero_point<4, 128>>(ctx, c, o);
}
std::unique_ptr<runner> make_none(bench_context& ctx, const config& c, const echo_runner_options& o) {
  return make_for<echo::quant::none>(ctx, c, o);
}

}  // namespace echo_perf
