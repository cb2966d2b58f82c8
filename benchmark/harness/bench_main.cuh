// echo_bench's side of the harness (bench_main.cu): Google Benchmark registration, the
// measurement method, the summary table and main(). A program links it with a variant table:
// echo_bench.cu defines variants().
#pragma once

#include "context.cuh"
#include "runner_options.hpp"

#include <memory>
#include <vector>

namespace echo_bench {

/// One row of the variant table: a name (the benchmark's name) and how to build its runner.
struct variant_spec {
  const char* name;
  std::unique_ptr<runner> (*make)(bench_context&);
};

/// The table the program measures, in order. Index 0 must be NCCL: every speedup refers to it.
const std::vector<variant_spec>& variants();

/// What every Echo runner of echo_bench is built with: 1 GiB of bf16 whatever the sizes (so a
/// size's result does not depend on which other sizes run; the transport::nccl chunk size
/// follows max_elements), ECHO_BENCH_WORKSPACE_MIB, and the path forced or dispatched.
echo_runner_options runner_options(bool forced);

}  // namespace echo_bench
