// How the benchmarks build an Echo runner (echo_runner.cuh).
#pragma once

#include <cstddef>

namespace echo_bench {

struct echo_runner_options {
  size_t max_elements = 0;     ///< every Echo object is built for this many elements
  size_t workspace_bytes = 0;  ///< 0: the library's default cap
  bool forced = true;          ///< the quantizer at every size (false: echo::tuning::dispatch_table decides)
  bool check_pointers = true;  ///< options::check_pointers (false: the _nocheck ablation)
  bool threads = false;        ///< each rank's calls from its own thread (always so for transport::nccl)
  long long wide_from = -1;    ///< options::wide_policy_from_bytes (-1: the dispatch table's)
  long long mid_from = -1;     ///< options::mid_policy_from_bytes (-1: the dispatch table's)
};

}  // namespace echo_bench
