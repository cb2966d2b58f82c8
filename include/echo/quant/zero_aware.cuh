// zero_aware<Bits, Group>: asymmetric grid whose integer zero point puts 0.0 exactly on it.
#pragma once

#include "group_params.cuh"

namespace echo::quant {

/// lo = min(min x, 0), hi = max(max x, 0), s = fp16_up((hi - lo) / (2^b - 1)), i = fp32(1 / s),
/// z = clamp(rint(-lo * i)), q = clamp(rint(x * i + z)) with x * i + z fused (one rounding),
/// x^ = (q - z) s. Zero decodes to zero. Wire: p0 = s, p1 = z (an integer, exact in fp16).
template <int Bits, int Group>
struct zero_aware : group_contract<Bits, Group> {
  using base = group_contract<Bits, Group>;
  static constexpr const char* name = "zero_aware";
  using closing = zero_aware<8, Group>;  ///< quant::closing_of
  static constexpr bool affine_decode = true;  // decode: (c - bias) s, bias - code_magic its zero's code

  ECHO_HD static wire_params fit(group_stats st) {
    using namespace echo::detail;
    if (!st.finite) return detail::non_finite_params;
    const float lo = fmin2(st.lo, 0.0f), hi = fmax2(st.hi, 0.0f);
    const uint16_t s_bits = detail::scale_bits(div_rn(sub_rn(hi, lo), static_cast<float>(base::max_code)));
    const group_params p = detail::unpacked({s_bits, 0}, 0.0f, 0.0f);
    const float z = clamp_code(rint_even(mul_rn(-lo, p.inv)), static_cast<float>(base::max_code));
    return {s_bits, float_to_half_bits(z)};
  }

  ECHO_HD static group_params unpack(wire_params w) {
    const float z = echo::detail::half_bits_to_float(w.p1);
    return detail::unpacked(w, z, z);
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
