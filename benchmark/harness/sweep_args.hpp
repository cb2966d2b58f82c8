// The flags echo-fused and echo-sp share: ranks, a geometric sweep of sizes, calls a round, warm-up
// calls, rounds, and the quantizer's name; a tool's own flags come through a callback.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace echo_bench {

struct sweep_args {
  int ranks = 2;
  size_t lo = 0, hi = 0, factor = 4;  ///< sizes lo, lo * factor, ... up to hi (factor 1: lo alone)
  int iters = 50, warmup = 10, rounds = 5;
  std::string quant = "default";
};

/// Parses -g RANKS -b LO -e HI -f FACTOR -n ITERS -w WARMUP -r ROUNDS -q QUANT into `a` (which holds
/// the tool's defaults), and the letters of `extra` ("H:" for -H VALUE) through own(letter, value),
/// which returns false for a bad value. 0: go on; -1: -h (usage printed; exit 0); else the exit
/// code of bad flags (usage printed).
int parse_sweep(int argc, char** argv, const char* tool, const char* usage, const char* extra, sweep_args& a,
                const std::function<bool(int, const char*)>& own = {});

/// The GPU count, or 0 after printing "<tool>: no GPU (skipped)" (the caller returns 77).
int gpus_or_skip(const char* tool);

}  // namespace echo_bench
