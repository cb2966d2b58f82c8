// comp::two_timescale<Storage, DecayPerMille> (research): error_feedback plus a slow per-site,
// per-channel estimate of the error each site injects, pre-injected at that site on later passes.
#pragma once

#include "error_feedback.cuh"

namespace echo::comp {

/// At site k (the k-th call since the chain's pass began) a rank adds s_k[channel] to its input
/// besides the fast state f. It then stores f = e - s_k (the part of its error it did not
/// pre-inject) and moves s_k toward the per-channel mean of e over the call's rows:
/// s_k <- d s_k + (1 - d) mean(e), d = DecayPerMille / 1000. Summed over a pass the residual
/// stream error telescopes to s_K - e_K: the last site's error less its predicted mean.
/// Host reference only: the device pipeline rejects it with a static_assert. Measured in
/// docs/depth-experiment.md: it ties error_feedback (within +-0.6 %) and is up to 2.3 % worse in
/// its own best case, so it is not recommended; it stays for that experiment to be reproducible.
template <class Storage = float, int DecayPerMille = 900>
struct two_timescale : error_feedback<Storage> {
  static_assert(DecayPerMille >= 0 && DecayPerMille < 1000, "echo::comp::two_timescale: decay in [0, 1000)");
  static constexpr const char* name = "two_timescale";
  static constexpr bool slow = true;
  static constexpr float decay = DecayPerMille / 1000.0f;
};

}  // namespace echo::comp
