// Host-side compensation state of one chain (the calls that add into one residual stream).
#pragma once

#include "../comp/none.cuh"
#include "../comp/state_storage.cuh"
#include "../dtype.cuh"
#include "../error.cuh"

#include <algorithm>
#include <string>
#include <vector>

namespace echo::reference {


/// Holds, per simulated rank, the n stored errors of the chain's last call, as they read back
/// from the compensator's storage (comp/state_storage.cuh: exactly what the device reads back). A
/// call with a different n than the chain's resets it: a shape change ends the chain. reset()
/// ends a pass.
template <class Comp>
class chain_state {
 public:
  chain_state(int ranks, size_t capacity) : ranks_(ranks), capacity_(capacity) {
    ECHO_REQUIRE(ranks >= 1, "echo::reference::chain_state", "ranks must be >= 1");
    if (Comp::keeps_state) errors_.assign(static_cast<size_t>(ranks), std::vector<float>(capacity, 0.0f));
  }

  int ranks() const { return ranks_; }
  size_t capacity() const { return capacity_; }
  size_t size() const { return n_; }

  /// End of a pass: the next call starts a new chain.
  void reset() {
    for (auto& r : errors_) std::fill(r.begin(), r.end(), 0.0f);
    n_ = 0;
    continues_ = false;
  }

  /// Whether the current call continues the chain: a call of the same n stored errors since the
  /// last reset. A call that starts a chain adds nothing to its input (not even +0, which would
  /// turn an input's -0 into +0), as the device's fresh chain does.
  bool continues() const { return continues_; }

  /// Stored error of rank r at element i, as it reads back.
  float error(int r, size_t i) const { return Comp::keeps_state ? errors_[static_cast<size_t>(r)][i] : 0.0f; }

  // --- used by reference::all_reduce ---------------------------------------------------------
  /// Start a call on n elements: checks the capacity, and resets on a shape change.
  /// Start a call on n elements whose errors are kept in `domain` (comp::state_header's: 0, or
  /// a quantizer's transformed domain): checks the capacity, and resets on a change of either.
  void begin_call(size_t n, unsigned domain = 0) {
    ECHO_REQUIRE(n <= capacity_, "echo::reference::all_reduce",
                 "n = " + std::to_string(n) + " exceeds the chain state capacity " + std::to_string(capacity_));
    if (n != n_ || domain != domain_) {
      reset();
      n_ = n;
      domain_ = domain;
    }
  }
  /// Whether the storage can keep errors in units of their data group's step (comp::step_state);
  /// a call uses it only where it quantizes on a grid that holds zero (reference::all_reduce,
  /// collective::tile_stages::uses_data_step), else the storage fits a step of its own.
  static constexpr bool stores_in_data_steps = comp::stores_in_data_steps<Comp>::value;

  /// Store rank r's errors of a call on n elements (e[0..n), already passed through Comp::keep).
  /// steps: for a storage that stores_in_data_steps, the parameters of the data group of every 32 elements
  /// (steps[k] for [32k, 32k + 32)), or null for a call without a data step (no quantization, or
  /// a grid without zero): the storage then fits its own.
  void set_errors(int r, const std::vector<float>& e, size_t n, const quant::group_params* steps = nullptr) {
    continues_ = true;
    if constexpr (Comp::keeps_state) {
      using S = comp::state_storage<typename Comp::storage>;
      float* out = errors_[static_cast<size_t>(r)].data();
      if constexpr (S::data_step) {
        if (steps) return S::round_trip(e.data(), n, steps, out);
      }
      S::round_trip(e.data(), n, out);
    }
  }

 private:
  int ranks_;
  size_t capacity_;
  size_t n_ = 0;
  unsigned domain_ = 0;
  bool continues_ = false;
  std::vector<std::vector<float>> errors_;
};

}  // namespace echo::reference
