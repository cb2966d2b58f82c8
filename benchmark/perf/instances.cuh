// echo-perf's runtime choice of quantizer x compensator x transport x element type, mapped onto
// compiled echo_runner instantiations. Deliberately small (each entry compiles Echo's kernels
// for 3 element types x 2 transports x 2 compensators): zero_aware 4 and 8 bits, symmetric 4,
// naive_zero_point 4 (groups of 128), and quant::none; comp::none and error_feedback<> (step8).
// Two more for the outlier path's cost, on cuda_ipc and bf16 only: rotated (quant::rotated of
// zero_aware<4, 128>, step8 state) and default (echo::default_quantizer, int8 state).
#pragma once

#include "../harness/context.cuh"
#include "../harness/runner_options.hpp"

#include <echo/dtype.cuh>

#include <memory>
#include <stdexcept>
#include <string>

namespace echo_perf {

using echo_bench::bench_context;
using echo_bench::echo_runner_options;
using echo_bench::runner;

enum class comp_kind { none, error_feedback };
enum class transport_kind { cuda_ipc, nccl };

struct config {
  std::string quant = "zero_aware";  ///< zero_aware, symmetric, naive_zero_point, none, rotated or default
  int bits = 4;
  int group = 128;
  comp_kind comp = comp_kind::none;
  transport_kind transport = transport_kind::cuda_ipc;
  echo::dtype type = echo::dtype::bf16;
};

/// What the table holds, for messages.
inline const char* compiled_configs() {
  return "zero_aware 4 or 8 bits, symmetric 4 bits, naive_zero_point 4 bits (all groups of 128), none; "
         "rotated and default (4 bits, groups of 128, cuda_ipc and bf16 only)";
}

/// The compensator x transport x element type instantiations of one quantizer (instances.cu).
std::unique_ptr<runner> make_zero_aware_4(bench_context&, const config&, const echo_runner_options&);
std::unique_ptr<runner> make_zero_aware_8(bench_context&, const config&, const echo_runner_options&);
std::unique_ptr<runner> make_symmetric_4(bench_context&, const config&, const echo_runner_options&);
std::unique_ptr<runner> make_naive_zero_point_4(bench_context&, const config&, const echo_runner_options&);
std::unique_ptr<runner> make_none(bench_context&, const config&, const echo_runner_options&);
std::unique_ptr<runner> make_rotated_4(bench_context&, const config&, const echo_runner_options&);
std::unique_ptr<runner> make_default_4(bench_context&, const config&, const echo_runner_options&);

}  // namespace echo_perf
