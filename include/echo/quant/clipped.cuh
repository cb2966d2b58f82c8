// clipped<Q, R>: Q fitted to its group's range shrunk to R / 1024 of it, so that the grid's steps
// are finer for the bulk of the group at the cost of the few values beyond the shrunk range, which
// clamp to the end codes. Only fit() changes: the wire parameters still say everything a decoder
// needs, so the wire size and the decode are Q's.
#pragma once

#include "../detail/fp_ops.cuh"
#include "group_params.cuh"

namespace echo::quant {

/// The range shrinks about zero for a grid that holds zero (zero_aware, symmetric: lo, hi times
/// R / 1024, exact for a power-of-two denominator up to rounding of the product), about its middle
/// for one that does not (naive_zero_point). Errors: a value inside the shrunk range errs by at
/// most half a (finer) step; a clamped one by its distance to the end code, up to
/// (1024 / R - 1) (2^b - 1) steps plus half a step: beyond what comp::step8_state / step4_state
/// hold (+-0.99 / +-0.875 steps; they clamp it, defined but lossy), within what int8_state and the
/// element storages keep. A group that is not finite is Q's (its NaN scale decodes it to NaN).
template <class Q, int Ratio1024>
struct clipped : Q {
  static_assert(Q::quantizes, "echo::quant::clipped: Q must be a group quantizer");
  static_assert(Ratio1024 > 0 && Ratio1024 < 1024, "echo::quant::clipped: the ratio (of 1024) must be in (0, 1024)");
  static constexpr int clip_ratio_1024 = Ratio1024;
  static constexpr float ratio = static_cast<float>(Ratio1024) / 1024.0f;
  using closing = typename Q::closing;  ///< quant::closing_of: no clip at 8 bits

  ECHO_HD static group_stats shrink(group_stats st) {
    using namespace echo::detail;
    if (!st.finite || !(st.lo <= st.hi)) return st;  // not finite, or empty
    if constexpr (Q::holds_zero) {
      st.lo = mul_rn(st.lo, ratio);
      st.hi = mul_rn(st.hi, ratio);
    } else {
      const float mid = add_rn(mul_rn(st.lo, 0.5f), mul_rn(st.hi, 0.5f));
      const float half = mul_rn(sub_rn(mul_rn(st.hi, 0.5f), mul_rn(st.lo, 0.5f)), ratio);
      st.lo = sub_rn(mid, half);
      st.hi = add_rn(mid, half);
    }
    return st;
  }
  ECHO_HD static wire_params fit(group_stats st) { return Q::fit(shrink(st)); }
};

/// R / 1024 of a quantizer's clip (1024: none), for signatures and names.
template <class Q, class = void>
struct clip_of {
  static constexpr int ratio_1024 = 1024;
};
template <class Q>
struct clip_of<Q, std::void_t<decltype(Q::clip_ratio_1024)>> {
  static constexpr int ratio_1024 = Q::clip_ratio_1024;
};

}  // namespace echo::quant
