// IEEE fp32 operations with a fixed rounding (nearest even), the same on host and device.
//
// On the device the _rn intrinsics stop nvcc from contracting a*b+c into an FMA, which would
// change the bits relative to the host. The host uses plain operators; where Echo multiplies
// and then adds, the product is exact (a small integer code times an fp16 scale fits in 24
// bits), so a host compiler that contracts cannot change the result either.
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

/// rint(t) as an integer, saturating at +-2^22 (the codes are clamped far inside that anyway).
/// Adding 1.5 * 2^23 rounds to an integer in the current (nearest-even) mode and leaves it in the
/// low mantissa bits: exact, full-rate on the device where a float-to-int conversion is not.
ECHO_HD int32_t round_to_int(float t) {
  t = fmin2(fmax2(t, -4194304.0f), 4194304.0f);
  uint32_t u;
#if ECHO_DEVICE_COMPILE
  u = __float_as_uint(add_rn(t, 12582912.0f));
#else
  const float f = add_rn(t, 12582912.0f);
  std::memcpy(&u, &f, sizeof u);
#endif
  return static_cast<int32_t>(u - 0x4B400000u);
}

/// float(d), exactly, for |d| < 2^22 (the reverse trick).
ECHO_HD float small_int_to_float(int32_t d) {
  const uint32_t u = 0x4B400000u + static_cast<uint32_t>(d);
#if ECHO_DEVICE_COMPILE
  return sub_rn(__uint_as_float(u), 12582912.0f);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return sub_rn(f, 12582912.0f);
#endif
}

ECHO_HD int32_t clamp_int(int32_t v, int32_t hi) { return v < 0 ? 0 : (v > hi ? hi : v); }

ECHO_HD float clamp_code(float v, float max_code) { return fmin2(fmax2(v, 0.0f), max_code); }

ECHO_HD bool is_finite(float a) {
#if ECHO_DEVICE_COMPILE
  return isfinite(a);
#else
  return std::isfinite(a);
#endif
}

}  // namespace echo::detail
