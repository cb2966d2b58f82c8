// What a group quantizer sees of a group (its statistics) and what it sends for it (two fp16
// parameters), plus the compile-time contract every group quantizer policy checks.
#pragma once

#include "../config.cuh"
#include "../detail/float16.cuh"
#include "../detail/fp_ops.cuh"

namespace echo::quant {

/// Min, max and finiteness of the values present in a group (a tail group has fewer than g).
struct group_stats {
  float lo;
  float hi;
  bool finite;

  ECHO_HD static group_stats empty() { return {INFINITY, -INFINITY, true}; }
  ECHO_HD void add(float x) {
    finite = finite && detail::is_finite(x);
    lo = detail::fmin2(lo, x);
    hi = detail::fmax2(hi, x);
  }
  ECHO_HD void merge(const group_stats& o) {
    finite = finite && o.finite;
    lo = detail::fmin2(lo, o.lo);
    hi = detail::fmax2(hi, o.hi);
  }
};

/// The two fp16 parameters of a group as they travel: p0 is always the scale.
/// A NaN scale marks a group that held NaN or Inf: every value of it decodes to NaN.
struct wire_params {
  uint16_t p0;
  uint16_t p1;
};

/// The wire parameters widened to fp32 once, as encoder and decoder both use them.
struct group_params {
  float scale;   ///< step of the grid (0 for a group that is all zero)
  float inv;     ///< 1 / scale rounded to nearest (0 when scale is 0)
  float offset;  ///< zero point (zero_aware), minimum (naive_zero_point) or code offset (symmetric)
  float bias;    ///< detail::code_magic + the integer code of 0.0 (zero_aware, symmetric); code_magic for naive and for a non-finite group
  bool finite;
};

namespace detail {

/// fp16 bits of f rounded in the given direction.
ECHO_HD uint16_t half_bits_up(float f) { return echo::detail::float_to_half_bits(f, echo::detail::round_mode::up); }
ECHO_HD uint16_t half_bits_down(float f) { return echo::detail::float_to_half_bits(f, echo::detail::round_mode::down); }

/// fp16 scale for a step s >= 0: rounded up so the grid covers the range, clamped to the
/// largest finite fp16 value (values beyond (2^b - 1) * 65504 then clamp to the end codes).
ECHO_HD uint16_t scale_bits(float s) {
  if (!(s > 0.0f)) return 0;
  const uint16_t h = half_bits_up(s);
  return h > echo::detail::half_max_finite ? echo::detail::half_max_finite : h;
}

/// The wire parameters unpacked to fp32 (group_params). A non-finite group (NaN scale) gets inv 0
/// and bias code_magic: x * 0 + code_magic is code_magic for a finite x and NaN for Inf or NaN,
/// which biased_code's clamp turns into code_magic too, so every value of the group codes to 0
/// with no test per value.
ECHO_HD group_params unpacked(wire_params w, float offset, float zero_code) {
  const float s = echo::detail::half_bits_to_float(w.p0);
  const bool finite = s == s;
  return {s, (finite && s > 0.0f) ? echo::detail::rcp_rn(s) : 0.0f, offset,
          finite ? echo::detail::add_rn(echo::detail::code_magic, zero_code) : echo::detail::code_magic, finite};
}

constexpr wire_params non_finite_params{echo::detail::half_nan, 0};

constexpr bool supported_bits(int b) { return b == 2 || b == 3 || b == 4 || b == 6 || b == 8; }
constexpr bool supported_group(int g) { return g == 32 || g == 64 || g == 128 || g == 256; }

}  // namespace detail

/// Compile-time contract shared by every group quantizer policy. A policy adds, all ECHO_HD:
///   fit(group_stats) -> wire_params        the group's parameters as they travel
///   unpack(wire_params) -> group_params    widened once for encode and decode
///   position(float, group_params) -> float where x lands on the grid: code_magic + q for an
///                                          integer q, rounded once, non-decreasing in x (for a
///                                          finite group), before any clamp
///   encode(float, group_params) -> code    biased: code_magic_bits + q, q in [0, max_code]:
///                                          detail::biased_code(position(x, p), max_code)
///   decode(code, group_params) -> float    from a biased code
/// (detail::biased_code, detail::biased_float: the clamp's result is the biased code, and decode
/// starts from it, so neither spends an operation a value on the bias.)
/// A policy whose decode is exactly mul_rn(sub_rn(biased_float(c), p.bias), p.scale), with
/// p.bias - code_magic the integer code of zero in [0, max_code] and p.scale an fp16 value (or
/// NaN), sets affine_decode: a codec may then decode it by any exact rearrangement
/// (collective::tile_codec::load does, for 4-bit codes).
template <int Bits, int Group>
struct group_contract {
  static_assert(detail::supported_bits(Bits), "echo::quant: Bits must be one of 2, 3, 4, 6, 8");
  static_assert(detail::supported_group(Group), "echo::quant: Group must be one of 32, 64, 128, 256");
  static constexpr int bits = Bits;
  static constexpr int group = Group;
  static constexpr bool quantizes = true;
  /// Whether zero is on the grid, so that every decoded value is within 2^b steps of zero (what
  /// comp::step_state relies on to keep the error of rounding the output in units of the data
  /// step; without it, step_state fits a step to the errors themselves).
  static constexpr bool holds_zero = true;
  static constexpr bool affine_decode = false;
  static constexpr uint32_t max_code = (1u << Bits) - 1u;
  /// Bytes of packed codes per group (g * b is a multiple of 32 for every supported pair).
  static constexpr size_t code_bytes = static_cast<size_t>(Group) * Bits / 8;
  static constexpr size_t param_bytes = 4;
  /// Bits per value on the wire, parameters included: b + 32 / g.
  static constexpr double wire_bits_per_value = Bits + 32.0 / Group;
};

}  // namespace echo::quant
