// symmetric<Bits, Group>: grid symmetric about zero, scaled by the group's largest magnitude.
#pragma once

#include "group_params.cuh"

namespace echo::quant {

/// s = fp16_up(max|x| / (2^(b-1) - 1)), i = fp32(1 / s), q = clamp(rint(x * i + 2^(b-1))) with
/// x * i + 2^(b-1) fused (one rounding), x^ = (q - 2^(b-1)) s. Zero decodes to zero; code 0 is
/// unused. Wire: p0 = s, p1 = 0.
template <int Bits, int Group>
struct symmetric : group_contract<Bits, Group> {
  using base = group_contract<Bits, Group>;
  static constexpr const char* name = "symmetric";
  using closing = symmetric<8, Group>;  ///< quant::closing_of
  static constexpr bool affine_decode = true;  // decode: (c - bias) s, bias - code_magic its zero's code
  static constexpr float code_offset = static_cast<float>(1u << (Bits - 1));

  ECHO_HD static wire_params fit(group_stats st) {
    using namespace echo::detail;
    if (!st.finite) return detail::non_finite_params;
    const float m = fmax2(-st.lo, st.hi);
    return {detail::scale_bits(div_rn(m, code_offset - 1.0f)), 0};
  }

  ECHO_HD static group_params unpack(wire_params w) {
    return detail::unpacked(w, code_offset, code_offset);
  }

  ECHO_HD static float position(float x, const group_params& p) {
    using namespace echo::detail;
    return fma_rn(x, p.inv, p.bias);
  }

  ECHO_HD static uint32_t encode(float x, const group_params& p) {
    return echo::detail::biased_code(position(x, p), base::max_code);
  }

  ECHO_HD static float decode(uint32_t c, const group_params& p) {
    using namespace echo::detail;
    return mul_rn(sub_rn(biased_float(c), p.bias), p.scale);
  }
};

}  // namespace echo::quant
