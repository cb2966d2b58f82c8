// echo-sim's command line: what to simulate and which Echo configurations to run.
#pragma once

#include "reducer.hpp"

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace echo_sim {

struct options {
  int ranks = 4;
  int depth = 512;
  int width = 512;
  int tokens = 16;
  int ffn = 0;  // 0: 4 * width
  std::vector<std::string> quants{"zero_aware"};
  std::vector<int> bits{4};
  std::vector<int> groups{128};
  std::vector<std::string> comps{"none", "error_feedback"};
  std::vector<collective> collectives{collective::all_reduce};
  uint64_t seed = 1;
  int passes = 1;
  int warmup = -1;          // -1: passes / 2
  double branch_gain = 0;   // 0: 1 / sqrt(depth)
  bool csv = false;
};

struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The --help text.
std::string usage_text();

/// Parses argv; sets `help` (and returns the defaults) on --help. Throws usage_error.
options parse(int argc, char** argv, bool& help);

}  // namespace echo_sim
