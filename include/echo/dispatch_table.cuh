// Size-based dispatch: which path a call of a given size takes, per GPU model and P.
#pragma once

#include "config.cuh"

#include <cstring>

namespace echo {

/// Below nccl_below bytes a call without compensation goes to NCCL's all-reduce (when the
/// communicator holds an ncclComm_t); below passthrough_below it takes Echo's 16-bit path
/// (quant::none through the same pipeline); at and above, the quantized path.
struct dispatch_entry {
  const char* gpu;  ///< substring of cudaDeviceProp::name
  int ranks;
  size_t nccl_below;
  size_t passthrough_below;
};

/// Measured with benchmark/echo_bench (see docs/benchmarks.md for the run behind each row).
inline constexpr dispatch_entry dispatch_table[] = {
    {"H200", 2, size_t(0), size_t(0)},
};

/// The entry for this GPU and P; unknown models and P get {0, 0}: always quantized.
inline dispatch_entry lookup_dispatch(const char* gpu_name, int ranks) {
  for (const auto& e : dispatch_table)
    if (e.ranks == ranks && std::strstr(gpu_name, e.gpu)) return e;
  return {"default", ranks, 0, 0};
}

}  // namespace echo
