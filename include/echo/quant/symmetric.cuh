// symmetric<Bits, Group>: grid symmetric about zero, scaled by the group's largest magnitude.
#pragma once

#include "group_params.cuh"

namespace echo::quant {

/// s = fp16_up(max|x| / (2^(b-1) - 1)), q = clamp(rint(x / s) + 2^(b-1)), x^ = (q - 2^(b-1)) s.
/// Zero decodes to zero; code 0 is unused. Wire: p0 = s, p1 = 0.
template <int Bits, int Group>
struct symmetric : group_contract<Bits, Group> {
  using base = group_contract<Bits, Group>;
  static constexpr const char* name = "symmetric";
  static constexpr float code_offset = static_cast<float>(1u << (Bits - 1));

  ECHO_HD static wire_params fit(group_stats st) {
    using namespace echo::detail;
    if (!st.finite) return detail::non_finite_params;
    const float m = fmax2(-st.lo, st.hi);
    return {detail::scale_bits(div_rn(m, code_offset - 1.0f)), 0};
  }

  ECHO_HD static group_params unpack(wire_params w) {
    return detail::widen(w, code_offset, static_cast<int32_t>(1u << (Bits - 1)));
  }

  ECHO_HD static uint32_t encode(float x, const group_params& p) {
    using namespace echo::detail;
    if (!p.finite) return 0;
    return static_cast<uint32_t>(clamp_int(round_to_int(mul_rn(x, p.inv)) + p.zero, base::max_code));
  }

  ECHO_HD static float decode(uint32_t q, const group_params& p) {
    using namespace echo::detail;
    return mul_rn(small_int_to_float(static_cast<int32_t>(q) - p.zero), p.scale);
  }
};

}  // namespace echo::quant
