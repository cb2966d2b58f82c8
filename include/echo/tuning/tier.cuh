// Which of a pipeline policy's variants a call runs under, by its size: the decision apart from any
// launch, a pure function of sizes every rank holds alike (so ranks agree), testable on the host.
#pragma once

#include <cstddef>
#include <cstdint>

namespace echo::tuning {

/// The policy itself (narrow), its mid variant (pipeline_policy::mid_for) or its wide variant
/// (pipeline_policy::wide_for).
enum class tier { narrow, mid, wide };

/// What one call's tier depends on, in bytes (SIZE_MAX: never).
struct tier_sizes {
  bool has_wide = false;  ///< the policy names a wide variant for this call
  bool has_mid = false;   ///< the policy names a mid variant for this call (quantized calls only)
  size_t wide = SIZE_MAX;       ///< this call's wide size (dispatch_entry, by call weight)
  size_t mid_from = SIZE_MAX;   ///< where the mid tier starts
  size_t wide_from = SIZE_MAX;  ///< the wide size of a policy without a mid variant
};

/// Wide from the call's wide size on; mid from mid_from on; else narrow. A call with a mid variant
/// that the mid tier does not take (below mid_from) goes wide from wide_from, as under a policy
/// without a mid variant: so moving the mid tier away (options) leaves no call narrow at every
/// size, even one whose own wide size is "never".
constexpr tier tier_for(size_t bytes, const tier_sizes& s) {
  if (s.has_wide) {
    if (bytes >= s.wide) return tier::wide;
    if (s.has_mid && bytes < s.mid_from && bytes >= s.wide_from) return tier::wide;
  }
  if (s.has_mid && bytes >= s.mid_from) return tier::mid;
  return tier::narrow;
}

}  // namespace echo::tuning
