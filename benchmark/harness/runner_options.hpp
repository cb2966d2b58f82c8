// How the benchmarks build an Echo runner (echo_runner.cuh).
#pragma once

#include <cstddef>
#include <optional>

namespace echo_bench {

struct echo_runner_options {
  size_t max_elements = 0;     ///< every Echo object is built for this many elements
  size_t workspace_bytes = 0;  ///< 0: the library's default cap
  bool forced = true;          ///< the quantizer at every size (false: echo::tuning::dispatch_table decides)
  bool check_pointers = true;  ///< options::check_pointers (false: the _nocheck ablation)
  bool threads = false;        ///< each rank's calls from its own thread (always so for transport::nccl)
  std::optional<size_t> wide_from;  ///< options::wide_policy_from_bytes (unset: the dispatch table's)
  std::optional<size_t> mid_from;   ///< options::mid_policy_from_bytes (unset: the dispatch table's)
};

}  // namespace echo_bench
