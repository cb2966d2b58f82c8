// Size-based dispatch: which path a call of a given size takes, per GPU model and P.
#pragma once

#include "config.cuh"

#include <cstring>

namespace echo {

/// Below passthrough_below bytes a call takes Echo's 16-bit path (quant::none through the same
/// pipeline: no quantization error, and at small sizes a latency no worse than the quantized
/// path); at and above, the quantized path. NCCL is never needed as a fallback: on the machines
/// measured, the 16-bit path beats NCCL's all-reduce at every small size (docs/benchmarks.md).
struct dispatch_entry {
  const char* gpu;  ///< substring of cudaDeviceProp::name
  int ranks;
  size_t passthrough_below;
};

/// Measured with benchmark/echo_bench; docs/benchmarks.md has the run behind each row.
inline constexpr dispatch_entry dispatch_table[] = {
    // 2 x H200 NV18, 2026-11-29: none16 13.2 / 13.8 us at 64 / 256 KiB against int4 15.2 / 15.9;
    // from 1 MiB on the 4-bit path is as fast or faster.
    {"H200", 2, size_t(1) << 20},
};

/// The entry for this GPU and P; unknown models and P get 0: always quantized.
inline dispatch_entry lookup_dispatch(const char* gpu_name, int ranks) {
  for (const auto& e : dispatch_table)
    if (e.ranks == ranks && std::strstr(gpu_name, e.gpu)) return e;
  return {"default", ranks, 0};
}

}  // namespace echo
