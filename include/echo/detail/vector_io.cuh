// Per-thread vectorised loads and stores of V consecutive elements, widened to / rounded from fp32.
#pragma once

#include "../dtype.cuh"

#include <type_traits>

namespace echo::detail {

#if ECHO_HAS_CUDA

/// Loads `valid` (<= V) elements; a full run of V uses 16-byte loads (the caller guarantees
/// 16-byte alignment of full runs). Missing elements read as 0.
template <class T, int V>
__device__ __forceinline__ void load_floats(const T* p, int valid, float (&v)[V]) {
  static_assert((V * sizeof(T)) % 16 == 0, "a full run must be whole 16-byte vectors");
  constexpr int per = 16 / sizeof(T);
  if (valid == V) {
    const uint4* q = reinterpret_cast<const uint4*>(p);
#pragma unroll
    for (int i = 0; i < V / per; ++i) {
      const uint4 w = q[i];
      const T* e = reinterpret_cast<const T*>(&w);
#pragma unroll
      for (int j = 0; j < per; ++j) v[i * per + j] = element_traits<T>::to_float(e[j]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] = i < valid ? element_traits<T>::to_float(p[i]) : 0.0f;
  }
}

/// V consecutive elements as loaded, not yet widened: lets a warp issue the loads of its next
/// sub-tile before it computes the current one.
template <class T, int V>
struct raw_run {
  static_assert((V * sizeof(T)) % 16 == 0, "a run must be whole 16-byte vectors");
  uint4 w[V * sizeof(T) / 16];
};

template <class T, int V>
__device__ __forceinline__ raw_run<T, V> load_raw(const T* p, int valid) {
  raw_run<T, V> r;
  if (valid == V) {
    const uint4* q = reinterpret_cast<const uint4*>(p);
#pragma unroll
    for (int i = 0; i < V * int(sizeof(T)) / 16; ++i) r.w[i] = q[i];
  } else {
    T* e = reinterpret_cast<T*>(r.w);
#pragma unroll
    for (int i = 0; i < V; ++i) e[i] = i < valid ? p[i] : T{};
  }
  return r;
}

template <class T, int V>
__device__ __forceinline__ void widen(const raw_run<T, V>& r, float (&v)[V]) {
  const T* e = reinterpret_cast<const T*>(r.w);
#pragma unroll
  for (int i = 0; i < V; ++i) v[i] = element_traits<T>::to_float(e[i]);
}

/// As load_floats, bypassing L1 (for data a peer wrote during this kernel).
template <class T, int V>
__device__ __forceinline__ void load_floats_cg(const T* p, int valid, float (&v)[V]) {
  constexpr int per = 16 / sizeof(T);
  if (valid == V) {
    const uint4* q = reinterpret_cast<const uint4*>(p);
#pragma unroll
    for (int i = 0; i < V / per; ++i) {
      const uint4 w = __ldcg(q + i);
      const T* e = reinterpret_cast<const T*>(&w);
#pragma unroll
      for (int j = 0; j < per; ++j) v[i * per + j] = element_traits<T>::to_float(e[j]);
    }
  } else {
    const unsigned short* s = reinterpret_cast<const unsigned short*>(p);
    const float* f = reinterpret_cast<const float*>(p);
#pragma unroll
    for (int i = 0; i < V; ++i) {
      if (i >= valid) {
        v[i] = 0.0f;
      } else if constexpr (sizeof(T) == 4) {
        v[i] = __ldcg(f + i);
      } else {
        T e;
        const unsigned short b = __ldcg(s + i);
        memcpy(&e, &b, 2);
        v[i] = element_traits<T>::to_float(e);
      }
    }
  }
}

/// Rounds to T (nearest even) and stores `valid` elements; full runs use 16-byte stores.
template <class T, int V>
__device__ __forceinline__ void store_floats(T* p, int valid, const float (&v)[V]) {
  constexpr int per = 16 / sizeof(T);
  if (valid == V) {
    uint4* q = reinterpret_cast<uint4*>(p);
#pragma unroll
    for (int i = 0; i < V / per; ++i) {
      uint4 w;
      if constexpr (std::is_same<T, bfloat16_t>::value) {  // two values per conversion, same rounding
        __nv_bfloat162* e = reinterpret_cast<__nv_bfloat162*>(&w);
#pragma unroll
        for (int j = 0; j < per / 2; ++j) e[j] = __floats2bfloat162_rn(v[i * per + 2 * j], v[i * per + 2 * j + 1]);
      } else {
        T* e = reinterpret_cast<T*>(&w);
#pragma unroll
        for (int j = 0; j < per; ++j) e[j] = element_traits<T>::from_float(v[i * per + j]);
      }
      q[i] = w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i)
      if (i < valid) p[i] = element_traits<T>::from_float(v[i]);
  }
}

/// Store W 32-bit words with the widest stores their alignment allows (W*4 % 16 == 0: 16-byte).
template <int W>
__device__ __forceinline__ void store_words(void* dst, const uint32_t (&w)[W]) {
  if constexpr (W % 4 == 0) {
    uint4* q = static_cast<uint4*>(dst);
#pragma unroll
    for (int i = 0; i < W / 4; ++i) q[i] = make_uint4(w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]);
  } else if constexpr (W % 2 == 0) {
    uint2* q = static_cast<uint2*>(dst);
#pragma unroll
    for (int i = 0; i < W / 2; ++i) q[i] = make_uint2(w[2 * i], w[2 * i + 1]);
  } else {
    uint32_t* q = static_cast<uint32_t*>(dst);
#pragma unroll
    for (int i = 0; i < W; ++i) q[i] = w[i];
  }
}

template <int W>
__device__ __forceinline__ void load_words_cg(const void* src, uint32_t (&w)[W]) {
  if constexpr (W % 4 == 0) {
    const uint4* q = static_cast<const uint4*>(src);
#pragma unroll
    for (int i = 0; i < W / 4; ++i) {
      const uint4 v = __ldcg(q + i);
      w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
    }
  } else if constexpr (W % 2 == 0) {
    const uint2* q = static_cast<const uint2*>(src);
#pragma unroll
    for (int i = 0; i < W / 2; ++i) {
      const uint2 v = __ldcg(q + i);
      w[2 * i] = v.x, w[2 * i + 1] = v.y;
    }
  } else {
    const uint32_t* q = static_cast<const uint32_t*>(src);
#pragma unroll
    for (int i = 0; i < W; ++i) w[i] = __ldcg(q + i);
  }
}

#endif

}  // namespace echo::detail
