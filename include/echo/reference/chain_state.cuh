// Host-side compensation state of one chain (the calls that add into one residual stream).
#pragma once

#include "../comp/none.cuh"
#include "../dtype.cuh"
#include "../error.cuh"

#include <algorithm>
#include <string>
#include <vector>

namespace echo::reference {

/// Holds, per simulated rank, the n stored errors of the chain's last call. A call with a
/// different n than the chain's resets it: a shape change ends the chain. reset() ends a pass.
template <class Comp>
class chain_state {
 public:
  using storage = typename Comp::storage;

  chain_state(int ranks, size_t capacity) : ranks_(ranks), capacity_(capacity) {
    ECHO_REQUIRE(ranks >= 1, "echo::reference::chain_state", "ranks must be >= 1");
    if (Comp::enabled) errors_.assign(static_cast<size_t>(ranks), std::vector<storage>(capacity, storage{}));
  }

  int ranks() const { return ranks_; }
  size_t capacity() const { return capacity_; }
  size_t size() const { return n_; }

  /// End of a pass: the next call starts a new chain.
  void reset() {
    for (auto& r : errors_) std::fill(r.begin(), r.end(), storage{});
    n_ = 0;
  }

  /// Stored error of rank r at element i, widened to fp32.
  float error(int r, size_t i) const {
    return Comp::enabled ? element_traits<storage>::to_float(errors_[static_cast<size_t>(r)][i]) : 0.0f;
  }

  // --- used by reference::all_reduce ---------------------------------------------------------
  /// Start a call on n elements: checks the capacity, and resets on a shape change.
  void begin_call(size_t n) {
    ECHO_REQUIRE(n <= capacity_, "echo::reference::all_reduce",
                 "n = " + std::to_string(n) + " exceeds the chain state capacity " + std::to_string(capacity_));
    if (n != n_) {
      reset();
      n_ = n;
    }
  }
  void set_error(int r, size_t i, float e) {
    if (Comp::enabled) errors_[static_cast<size_t>(r)][i] = element_traits<storage>::from_float(e);
  }

 private:
  int ranks_;
  size_t capacity_;
  size_t n_ = 0;
  std::vector<std::vector<storage>> errors_;
};

}  // namespace echo::reference
