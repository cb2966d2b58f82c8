// naive_zero_point<Bits, Group>: min-max grid anchored at the group minimum (the ablation
// baseline: zero is generally not on the grid).
#pragma once

#include "group_params.cuh"

namespace echo::quant {

/// lo_h = fp16_down(min x) (clamped to the finite fp16 range), s = fp16_up((max x - lo_h) / (2^b - 1)),
/// i = fp32(1 / s), q = clamp(rint((x - lo_h) * i)) with the product and the rounding to an integer
/// fused (one rounding), x^ = lo_h + q s. Rounding lo down and s up keeps the whole
/// group inside the grid. Wire: p0 = s, p1 = lo_h.
template <int Bits, int Group>
struct naive_zero_point : group_contract<Bits, Group> {
  using base = group_contract<Bits, Group>;
  static constexpr const char* name = "naive_zero_point";
  using closing = naive_zero_point<8, Group>;  ///< quant::closing_of
  static constexpr bool holds_zero = false;  // a group far from zero decodes far from zero

  ECHO_HD static wire_params fit(group_stats st) {
    using namespace echo::detail;
    if (!st.finite) return detail::non_finite_params;
    uint16_t lo_bits = detail::half_bits_down(st.lo);
    if ((lo_bits & 0x7FFFu) > half_max_finite) lo_bits = static_cast<uint16_t>((lo_bits & 0x8000u) | half_max_finite);
    const float lo = half_bits_to_float(lo_bits);
    const uint16_t s_bits = detail::scale_bits(div_rn(sub_rn(st.hi, lo), static_cast<float>(base::max_code)));
    return {s_bits, lo_bits};
  }

  ECHO_HD static group_params unpack(wire_params w) {
    return detail::unpacked(w, echo::detail::half_bits_to_float(w.p1), 0.0f);
  }

  ECHO_HD static float position(float x, const group_params& p) {
    using namespace echo::detail;
    return fma_rn(sub_rn(x, p.offset), p.inv, p.bias);
  }

  ECHO_HD static uint32_t encode(float x, const group_params& p) {
    return echo::detail::biased_code(position(x, p), base::max_code);
  }

  ECHO_HD static float decode(uint32_t c, const group_params& p) {
    using namespace echo::detail;
    return add_rn(p.offset, mul_rn(sub_rn(biased_float(c), p.bias), p.scale));
  }
};

}  // namespace echo::quant
