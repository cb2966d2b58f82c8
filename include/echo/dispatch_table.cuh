// Size-based dispatch: which path a call of a given size takes, per GPU model and P.
#pragma once

#include "config.cuh"

#include <cstring>

namespace echo {

/// Below passthrough_below bytes a call takes Echo's 16-bit path: without compensation and up to
/// 1 MiB the one-shot kernel (every rank sums all inputs itself: one flag round trip), else
/// quant::none through the pipeline; at and above, the quantized path. NCCL is never needed as a fallback: on the machines
/// measured, the 16-bit path beats NCCL's all-reduce at every small size (docs/benchmarks.md).
struct dispatch_entry {
  const char* gpu;  ///< substring of cudaDeviceProp::name
  int ranks;
  size_t passthrough_below;
};

/// Measured with benchmark/echo_bench; docs/benchmarks.md has the run behind each row.
inline constexpr dispatch_entry dispatch_table[] = {
    // 2 x H200 NV18, 2026-11-29: up to 1 MiB the one-shot 16-bit path (no compensation) or the
    // 16-bit pipeline; from 2 MiB on the 4-bit path is faster than both.
    {"H200", 2, size_t(2) << 20},
};

/// The entry for this GPU and P; unknown models and P get 0: always quantized.
inline dispatch_entry lookup_dispatch(const char* gpu_name, int ranks) {
  for (const auto& e : dispatch_table)
    if (e.ranks == ranks && std::strstr(gpu_name, e.gpu)) return e;
  return {"default", ranks, 0};
}

}  // namespace echo
