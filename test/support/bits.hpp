// Bit-level comparison helpers for Echo's host tests.
#pragma once

#include <echo/dtype.cuh>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

namespace echo_test {

inline uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline uint16_t bits_of(echo::half_t h) { return h.bits; }
inline uint16_t bits_of(echo::bfloat16_t b) { return b.bits; }

template <class T>
float widen(T x) {
  return echo::element_traits<T>::to_float(x);
}
template <class T>
T narrow(float x) {
  return echo::element_traits<T>::from_float(x);
}

/// Bit equality in which any NaN equals any NaN (payloads and signs of NaNs differ legitimately
/// between conversion paths); everything else, +0 / -0 included, must match bit for bit.
template <class T>
bool same_bits(T a, T b) {
  const float fa = widen(a), fb = widen(b);
  if (std::isnan(fa) || std::isnan(fb)) return std::isnan(fa) && std::isnan(fb);
  return bits_of(a) == bits_of(b);
}

/// Index of the first element where a and b differ by same_bits, or n if none does.
template <class T>
size_t first_difference(const T* a, const T* b, size_t n) {
  for (size_t k = 0; k < n; ++k)
    if (!same_bits(a[k], b[k])) return k;
  return n;
}

template <class T>
std::string type_name() {
  if constexpr (std::is_same<T, float>::value) return "float";
  else if constexpr (std::is_same<T, echo::half_t>::value) return "half_t";
  else return "bfloat16_t";
}

}  // namespace echo_test
