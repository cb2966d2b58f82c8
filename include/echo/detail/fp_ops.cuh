// IEEE fp32 operations with a fixed rounding (nearest even), the same on host and device.
//
// On the device the _rn intrinsics stop nvcc from contracting a*b+c into an FMA, which would
// change the bits relative to the host; where Echo wants a fused multiply-add it says so
// (fma_rn, exact on both sides). The host uses plain operators; where Echo multiplies and then
// adds, the product is exact (a small integer code times an fp16 scale fits in 24 bits), so a
// host compiler that contracts cannot change the result either.
#pragma once

#include "../config.cuh"

#include <cmath>
#include <cstring>

namespace echo::detail {

ECHO_HD float add_rn(float a, float b) {
#if ECHO_DEVICE_COMPILE
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

ECHO_HD float sub_rn(float a, float b) {
#if ECHO_DEVICE_COMPILE
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

ECHO_HD float mul_rn(float a, float b) {
#if ECHO_DEVICE_COMPILE
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

ECHO_HD float div_rn(float a, float b) {
#if ECHO_DEVICE_COMPILE
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

ECHO_HD float rcp_rn(float a) {
#if ECHO_DEVICE_COMPILE
  return __frcp_rn(a);
#else
  return 1.0f / a;
#endif
}

ECHO_HD float sqrt_rn(float a) {
#if ECHO_DEVICE_COMPILE
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

/// a * b + c with one rounding (IEEE fused multiply-add; the host's std::fma is exact too).
ECHO_HD float fma_rn(float a, float b, float c) {
#if ECHO_DEVICE_COMPILE
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

/// Round to the nearest integer, ties to even (the default IEEE mode on both sides).
ECHO_HD float rint_even(float a) {
#if ECHO_DEVICE_COMPILE
  return rintf(a);
#else
  return std::nearbyint(a);
#endif
}

ECHO_HD float fmin2(float a, float b) {
#if ECHO_DEVICE_COMPILE
  return fminf(a, b);
#else
  return std::fmin(a, b);
#endif
}

ECHO_HD float fmax2(float a, float b) {
#if ECHO_DEVICE_COMPILE
  return fmaxf(a, b);
#else
  return std::fmax(a, b);
#endif
}

/// 1.5 * 2^23: adding it to |t| < 2^22 rounds t to an integer (nearest even) and leaves that
/// integer in the low mantissa bits. Quantizers add it inside one fma, so a code costs an fma, a
/// clamp and a bit extract, with the product never rounded on its own.
constexpr float code_magic = 12582912.0f;
constexpr uint32_t code_magic_bits = 0x4B400000u;

/// Codes travel biased: code_magic_bits + q, the bits of the float code_magic + q (q < 2^22).
/// A quantizer's encode ends in a clamp whose result is that float, and its decode starts by
/// subtracting a bias from it, so neither needs an operation to convert; the packet masks a code
/// into its bits and ors the bias back when it reads one (one operation with the shift).
///
/// The biased code of t = code_magic + (an integer), clamped to [0, max_code] in the float
/// domain (so any t, however far out, lands on an end code, and a NaN on code 0: fmin / fmax
/// return the other operand).
ECHO_HD uint32_t biased_code(float t, uint32_t max_code) {
  t = fmin2(fmax2(t, code_magic), code_magic + static_cast<float>(max_code));
#if ECHO_DEVICE_COMPILE
  return __float_as_uint(t);
#else
  uint32_t u;
  std::memcpy(&u, &t, sizeof u);
  return u;
#endif
}

/// code_magic + q as a float, exactly: the value a biased code stands for.
ECHO_HD float biased_float(uint32_t c) {
#if ECHO_DEVICE_COMPILE
  return __uint_as_float(c);
#else
  float f;
  std::memcpy(&f, &c, sizeof f);
  return f;
#endif
}

/// q <-> its biased code (code_magic_bits has 22 low zero bits).
ECHO_HD constexpr uint32_t biased(uint32_t q) { return code_magic_bits | q; }
ECHO_HD constexpr uint32_t unbiased(uint32_t c) { return c & 0x3FFFFFu; }

ECHO_HD float clamp_code(float v, float max_code) { return fmin2(fmax2(v, 0.0f), max_code); }

ECHO_HD bool is_finite(float a) {
#if ECHO_DEVICE_COMPILE
  return isfinite(a);
#else
  return std::isfinite(a);
#endif
}

}  // namespace echo::detail
