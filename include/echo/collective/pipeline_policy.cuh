// Tuning knobs of the device pipeline. None of them changes a result bit: tiles and blocks only
// decide who computes what, never how groups, segments or summation order are defined.
#pragma once

#include "../config.cuh"

namespace echo::collective {

template <int Threads = 256, int BlocksPerSm = 2, int FlagElems = 8192, int LaneValues = 16>
struct pipeline_policy {
  static_assert(LaneValues == 16 || LaneValues == 32, "pipeline_policy: LaneValues must be 16 or 32");
  static_assert(FlagElems >= 32, "pipeline_policy: FlagElems >= 32");
  static_assert(Threads % 32 == 0 && Threads >= 64 && Threads <= 1024, "pipeline_policy: Threads must be a multiple of 32 in [64, 1024]");
  static_assert(BlocksPerSm >= 1 && Threads * BlocksPerSm <= 2048, "pipeline_policy: at most 2048 threads per SM");
  static constexpr int threads = Threads;
  /// Resident blocks per SM the kernels are compiled for (__launch_bounds__ minimum, which caps
  /// registers at 65536 / (Threads * BlocksPerSm)) and the most the grid uses.
  static constexpr int blocks_per_sm = BlocksPerSm;
  /// The most values one ready flag covers in the cuda_ipc kernel (whole warp sub-tiles): larger
  /// amortises the flag's system-scope fence; small messages use fewer so every warp has work.
  static constexpr int flag_elems = FlagElems;
  /// Values a lane quantizes at once (tile_codec): 32 halves the per-lane share of a group's fit
  /// and doubles the bytes in flight per load, at the cost of registers.
  static constexpr int lane_values = LaneValues;
};

using default_policy = pipeline_policy<>;

}  // namespace echo::collective
