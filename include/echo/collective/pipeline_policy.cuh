// Tuning knobs of the device pipeline. None of them changes a result bit: tiles and blocks only
// decide who computes what, never how groups, segments or summation order are defined.
#pragma once

#include "../config.cuh"

namespace echo::collective {

template <int Threads = 512, int MaxBlocksPerSm = 2>
struct pipeline_policy {
  static_assert(Threads % 32 == 0 && Threads >= 64 && Threads <= 1024, "pipeline_policy: Threads must be a multiple of 32 in [64, 1024]");
  static_assert(MaxBlocksPerSm >= 1, "pipeline_policy: MaxBlocksPerSm >= 1");
  static constexpr int threads = Threads;
  /// Upper bound on resident blocks per SM used by the grid (the occupancy calculator may give fewer).
  static constexpr int max_blocks_per_sm = MaxBlocksPerSm;
};

using default_policy = pipeline_policy<>;

}  // namespace echo::collective
