// echo-perf's runtime choice of quantizer x compensator x transport x element type, mapped onto
// compiled echo_runner instantiations: the quantizers echo/registry.cuh marks tool::perf (bf16,
// fp16 and fp32 over both transports) and tool::perf_bf16 (bf16 over cuda_ipc only), each with
// comp::none and one error-feedback storage, the first registered for tool::perf that holds the
// quantizer's errors (step8, or int8 for a clipped quantizer).
#pragma once

#include "../harness/context.cuh"
#include "../harness/runner_options.hpp"

#include <echo/dtype.cuh>

#include <memory>
#include <string>
#include <vector>

namespace echo_perf {

using echo_bench::bench_context;
using echo_bench::echo_runner_options;
using echo_bench::runner;

enum class comp_kind { none, error_feedback };
enum class transport_kind { cuda_ipc, nccl };

struct config {
  std::string quant = "zero_aware";  ///< a registered quantizer's name, or rotated / default (aliases)
  int bits = 4;
  int group = 128;
  comp_kind comp = comp_kind::none;
  transport_kind transport = transport_kind::cuda_ipc;
  echo::dtype type = echo::dtype::bf16;
};

using factory = std::unique_ptr<runner> (*)(bench_context&, const config&, const echo_runner_options&);

/// One compiled quantizer (instances.cu).
struct instance {
  std::string name;        ///< -q: the quantizer's name, "rotated" (rotated, no clip) or "default" (echo::default_quantizer)
  int bits, group;         ///< -B, -G (0 for a quantizer that does not quantize: -q none ignores them)
  std::string type_name;   ///< the quantizer's C++ name, for the report's header
  const char* ef_storage;  ///< the state -c error_feedback keeps
  bool bf16_cuda_ipc_only;
  factory make;
};

/// Every compiled quantizer, in the registry's order.
const std::vector<instance>& instances();

}  // namespace echo_perf
