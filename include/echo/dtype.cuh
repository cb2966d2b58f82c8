// Element types Echo accepts: fp32, fp16 and bf16, with their conversions to and from fp32.
#pragma once

#include "config.cuh"
#include "detail/float16.cuh"
#include "error.cuh"

#include <type_traits>

#if ECHO_HAS_CUDA
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

namespace echo {

/// Runtime element type tag (for callers such as PyTorch extensions that hold a dtype value).
enum class dtype { f32, f16, bf16 };

/// 16-bit storage types usable from plain C++; layout-compatible with __half / __nv_bfloat16.
struct half_t {
  uint16_t bits;
};
struct bfloat16_t {
  uint16_t bits;
};
static_assert(sizeof(half_t) == 2 && sizeof(bfloat16_t) == 2, "16-bit storage types");

inline const char* to_string(dtype t) {
  switch (t) {
    case dtype::f32: return "f32";
    case dtype::f16: return "f16";
    case dtype::bf16: return "bf16";
  }
  return "unknown";
}

inline size_t size_of(dtype t) {
  switch (t) {
    case dtype::f32: return 4;
    case dtype::f16:
    case dtype::bf16: return 2;
  }
  throw error("echo::size_of", "unsupported dtype " + std::to_string(static_cast<int>(t)), __FILE__, __LINE__);
}

/// element_traits<T>: to_float is exact; from_float rounds to nearest even, identically on host
/// and device (the device uses the hardware conversion, the host the bit-level twin).
template <class T>
struct element_traits;  // undefined: unsupported element types fail to compile here

template <>
struct element_traits<float> {
  static constexpr dtype tag = dtype::f32;
  ECHO_HD static float to_float(float x) { return x; }
  ECHO_HD static float from_float(float x) { return x; }
};

template <>
struct element_traits<half_t> {
  static constexpr dtype tag = dtype::f16;
  ECHO_HD static float to_float(half_t x) {
#if ECHO_DEVICE_COMPILE
    return __half2float(__ushort_as_half(x.bits));
#else
    return detail::half_bits_to_float(x.bits);
#endif
  }
  ECHO_HD static half_t from_float(float x) {
#if ECHO_DEVICE_COMPILE
    return half_t{__half_as_ushort(__float2half_rn(x))};
#else
    return half_t{detail::float_to_half_bits(x)};
#endif
  }
};

template <>
struct element_traits<bfloat16_t> {
  static constexpr dtype tag = dtype::bf16;
  ECHO_HD static float to_float(bfloat16_t x) { return detail::bf16_bits_to_float(x.bits); }
  ECHO_HD static bfloat16_t from_float(float x) {
#if ECHO_DEVICE_COMPILE
    return bfloat16_t{__bfloat16_as_ushort(__float2bfloat16_rn(x))};
#else
    return bfloat16_t{detail::float_to_bf16_bits(x)};
#endif
  }
};

#if ECHO_HAS_CUDA
// CUDA's own types map onto the storage types above.
template <>
struct element_traits<__half> {
  static constexpr dtype tag = dtype::f16;
  ECHO_HD static float to_float(__half x) { return __half2float(x); }
  ECHO_HD static __half from_float(float x) { return __float2half_rn(x); }
};
template <>
struct element_traits<__nv_bfloat16> {
  static constexpr dtype tag = dtype::bf16;
  ECHO_HD static float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
  ECHO_HD static __nv_bfloat16 from_float(float x) { return __float2bfloat16_rn(x); }
};
#endif

/// The plain storage type Echo instantiates its kernels for (CUDA's types map onto ours).
template <class T>
struct storage_of {
  using type = T;
};
#if ECHO_HAS_CUDA
template <>
struct storage_of<__half> {
  using type = half_t;
};
template <>
struct storage_of<__nv_bfloat16> {
  using type = bfloat16_t;
};
#endif
template <class T>
using storage_of_t = typename storage_of<T>::type;

template <class T, class = void>
struct is_element : std::false_type {};
template <class T>
struct is_element<T, std::void_t<decltype(element_traits<T>::tag)>> : std::true_type {};

/// Call f(T{}) with the storage type matching the runtime tag; throws on an unknown tag.
template <class F>
decltype(auto) dispatch_dtype(dtype t, F&& f) {
  switch (t) {
    case dtype::f32: return f(float{});
    case dtype::f16: return f(half_t{});
    case dtype::bf16: return f(bfloat16_t{});
  }
  throw error("echo::dispatch_dtype", "unsupported dtype " + std::to_string(static_cast<int>(t)), __FILE__, __LINE__);
}

}  // namespace echo
