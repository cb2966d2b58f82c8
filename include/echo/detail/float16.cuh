// Bit-level fp16 / bf16 conversions shared by host and device.
//
// The host reference must round exactly as CUDA's __float2half_rn / __float2bfloat16_rn do, so
// the host side is written here on raw bits; the device compiles the fp16 conversions to its
// conversion instructions (one operation each, the same IEEE result; a NaN becomes 0x7FFF). Directed rounding (up / down) is used for quantizer
// parameters so that the fp16 grid always covers the group's range.
#pragma once

#include "../config.cuh"

#include <cstring>

#if ECHO_HAS_CUDA
#include <cuda_fp16.h>
#endif

namespace echo::detail {

enum class round_mode { nearest_even, up, down };

ECHO_HD uint32_t float_bits(float f) {
#if ECHO_DEVICE_COMPILE
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

ECHO_HD float bits_float(uint32_t u) {
#if ECHO_DEVICE_COMPILE
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

constexpr uint16_t half_nan = 0x7FFF;       // what CUDA's conversions produce for any NaN
constexpr uint16_t half_max_finite = 0x7BFF;  // 65504
constexpr uint16_t bf16_nan = 0x7FFF;

/// float -> IEEE binary16 bits with the given rounding; overflow follows IEEE for the mode
/// (to infinity, or to the largest finite value when rounding toward zero's side).
ECHO_HD uint16_t float_to_half_bits(float f, round_mode mode = round_mode::nearest_even) {
#if ECHO_DEVICE_COMPILE
  // The conversion instruction: the same IEEE result (and NaN -> 0x7FFF) in one operation.
  switch (mode) {
    case round_mode::up: return __half_as_ushort(__float2half_ru(f));
    case round_mode::down: return __half_as_ushort(__float2half_rd(f));
    default: return __half_as_ushort(__float2half_rn(f));
  }
#else
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t exp = (u >> 23) & 0xFFu;
  const uint32_t mant = u & 0x7FFFFFu;
  const bool neg = sign != 0;
  if (exp == 0xFFu) return mant ? half_nan : static_cast<uint16_t>(sign | 0x7C00u);
  const int e_h = static_cast<int>(exp) - 127 + 15;
  if (e_h >= 31) {  // beyond the fp16 range
    const bool to_inf = mode == round_mode::nearest_even || (mode == round_mode::up && !neg) ||
                        (mode == round_mode::down && neg);
    return static_cast<uint16_t>(sign | (to_inf ? 0x7C00u : half_max_finite));
  }
  uint32_t m;      // significand with the implicit bit
  uint32_t base;   // exponent field already placed, for normal results
  int shift;       // bits of m dropped
  if (e_h >= 1) {
    m = mant;
    base = static_cast<uint32_t>(e_h) << 10;
    shift = 13;
  } else {
    m = exp ? (mant | 0x800000u) : mant;
    base = 0;
    shift = 14 - e_h;          // 13 for the format, more for the subnormal position
    if (shift > 25) shift = 25;  // m < 2^24: everything is remainder
  }
  const uint32_t kept = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1);
  bool inc = false;
  switch (mode) {
    case round_mode::nearest_even: inc = rem > halfway || (rem == halfway && (kept & 1u)); break;
    case round_mode::up: inc = !neg && rem != 0; break;
    case round_mode::down: inc = neg && rem != 0; break;
  }
  // A carry out of the significand moves into the exponent field, which is the right result
  // (also from the largest subnormal to the smallest normal, and to infinity).
  return static_cast<uint16_t>(sign | (base + kept + (inc ? 1u : 0u)));
#endif
}

ECHO_HD float half_bits_to_float(uint16_t h) {
#if ECHO_DEVICE_COMPILE
  return __half2float(__ushort_as_half(h));  // exact for every finite value (a NaN stays a NaN)
#else
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  if (exp == 0x1Fu) return bits_float(sign | 0x7F800000u | (mant << 13));
  if (exp != 0) return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return bits_float(sign);
  int e = 113;  // normalise a subnormal
  while (!(mant & 0x400u)) {
    mant <<= 1;
    --e;
  }
  return bits_float(sign | (static_cast<uint32_t>(e) << 23) | ((mant & 0x3FFu) << 13));
#endif
}

ECHO_HD uint16_t float_to_bf16_bits(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return bf16_nan;
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

ECHO_HD float bf16_bits_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

}  // namespace echo::detail
