// Host-side compensation state of one chain (the calls that add into one residual stream).
#pragma once

#include "../comp/none.cuh"
#include "../dtype.cuh"
#include "../error.cuh"

#include <algorithm>
#include <vector>

namespace echo::reference {

/// Holds, per simulated rank, the n stored errors of the chain's last call (and, for a slow
/// compensator, one per-channel estimate per site). A call with a different n than the chain's
/// resets it: a shape change ends the chain. reset() ends a pass (the fast state is cleared, the
/// slow estimates are kept: they are meant to carry across passes).
template <class Comp>
class chain_state {
 public:
  using storage = typename Comp::storage;

  /// `channels`: the width of a row, for per-channel slow estimates (0: one channel per element).
  chain_state(int ranks, size_t capacity, size_t channels = 0)
      : ranks_(ranks), capacity_(capacity), channels_(channels) {
    ECHO_REQUIRE(ranks >= 1, "echo::reference::chain_state", "ranks must be >= 1");
    if (Comp::enabled) fast_.assign(static_cast<size_t>(ranks), std::vector<storage>(capacity, storage{}));
  }

  int ranks() const { return ranks_; }
  size_t capacity() const { return capacity_; }
  size_t size() const { return n_; }
  size_t site() const { return site_; }

  /// End of a pass: the next call starts a new chain.
  void reset() {
    for (auto& r : fast_) std::fill(r.begin(), r.end(), storage{});
    n_ = 0;
    site_ = 0;
  }

  /// Stored fast error of rank r at element i, widened to fp32.
  float error(int r, size_t i) const {
    return Comp::enabled ? element_traits<storage>::to_float(fast_[static_cast<size_t>(r)][i]) : 0.0f;
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
  void end_call() { ++site_; }
  void set_error(int r, size_t i, float e) {
    if (Comp::enabled) fast_[static_cast<size_t>(r)][i] = element_traits<storage>::from_float(e);
  }
  size_t channel_count(size_t n) const { return channels_ ? channels_ : n; }
  /// Slow estimates of site `site_` for rank r (created as zeros on first use).
  std::vector<float>& slow(int r, size_t n) {
    const size_t C = channel_count(n);
    if (slow_.size() <= site_) slow_.resize(site_ + 1);
    auto& site = slow_[site_];
    if (site.size() != static_cast<size_t>(ranks_) || site[0].size() != C)
      site.assign(static_cast<size_t>(ranks_), std::vector<float>(C, 0.0f));
    return site[static_cast<size_t>(r)];
  }

 private:
  int ranks_;
  size_t capacity_;
  size_t channels_;
  size_t n_ = 0;
  size_t site_ = 0;
  std::vector<std::vector<storage>> fast_;
  std::vector<std::vector<std::vector<float>>> slow_;  // [site][rank][channel]
};

}  // namespace echo::reference
