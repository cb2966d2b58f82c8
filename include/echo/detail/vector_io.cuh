// Per-thread vectorised loads and stores of V consecutive elements, widened to / rounded from fp32.
// Full runs use 16-byte accesses (the caller guarantees 16-byte alignment of full runs); memory a
// peer wrote during the current launch is read with ld.global.cg (cub::LOAD_CG: L2, never a
// stale L1 line).
#pragma once

#include "../dtype.cuh"

#include <type_traits>

#if ECHO_HAS_CUDA
#include <cub/thread/thread_load.cuh>
#endif

namespace echo::detail {

#if ECHO_HAS_CUDA

/// Asks L2 to fetch [p, p + bytes) ahead of the loads that will read it: one instruction for
/// the whole range, issued by one lane (sm_90's bulk prefetch: a hint that orders nothing and
/// holds no register). [p, p + bytes) must be memory the caller may read, p 16-byte aligned,
/// bytes a multiple of 16. Below sm_90 (or CUDA 12, which brought the instruction): nothing.
__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes) {
#if __CUDA_ARCH__ >= 900 && __CUDACC_VER_MAJOR__ >= 12
  if (bytes > 0)
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(static_cast<unsigned long long>(__cvta_generic_to_global(p))),
                 "r"(bytes));
#else
  (void)p, (void)bytes;
#endif
}

/// V consecutive elements as loaded, not yet widened: lets a warp issue the loads of its next
/// sub-tile before it computes the current one.
template <class T, int V>
struct raw_run {
  static_assert((V * sizeof(T)) % 16 == 0, "a run must be whole 16-byte vectors");
  uint4 w[V * sizeof(T) / 16];
};

/// Loads `valid` (<= V) elements; missing ones read as 0.
template <class T, int V, cub::CacheLoadModifier M = cub::LOAD_DEFAULT>
__device__ __forceinline__ raw_run<T, V> load_raw(const T* p, int valid) {
  raw_run<T, V> r;
  if (valid == V) {
#pragma unroll
    for (int i = 0; i < V * int(sizeof(T)) / 16; ++i) r.w[i] = cub::ThreadLoad<M>(reinterpret_cast<const uint4*>(p) + i);
  } else {
    T* e = reinterpret_cast<T*>(r.w);
#pragma unroll
    for (int i = 0; i < V; ++i) e[i] = i < valid ? cub::ThreadLoad<M>(const_cast<T*>(p) + i) : T{};
  }
  return r;
}

template <class T, int V>
__device__ __forceinline__ void widen(const raw_run<T, V>& r, float (&v)[V]) {
  const T* e = reinterpret_cast<const T*>(r.w);
#pragma unroll
  for (int i = 0; i < V; ++i) v[i] = element_traits<T>::to_float(e[i]);
}

/// widen, bf16 taken from the 32-bit word of each pair: one operation a value, where through
/// 16-bit elements ptxas spends two on every second one; the words stay live longer, which costs
/// registers (collective::tile_stages::widen_words says where it pays).
template <class T, int V>
__device__ __forceinline__ void widen_pairs(const raw_run<T, V>& r, float (&v)[V]) {
  if constexpr (std::is_same<T, bfloat16_t>::value) {
    const uint32_t* w = reinterpret_cast<const uint32_t*>(r.w);
#pragma unroll
    for (int i = 0; i < V / 2; ++i) {
      v[2 * i] = __uint_as_float(w[i] << 16);
      v[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
    }
  } else {
    widen(r, v);
  }
}

template <class T, int V, cub::CacheLoadModifier M = cub::LOAD_DEFAULT>
__device__ __forceinline__ void load_floats(const T* p, int valid, float (&v)[V]) {
  widen(load_raw<T, V, M>(p, valid), v);
}

/// Rounds to T (nearest even) and stores `valid` elements; full runs use 16-byte stores.
template <class T, int V>
__device__ __forceinline__ void store_floats(T* p, int valid, const float (&v)[V]) {
  constexpr int per = 16 / sizeof(T);
  static_assert(V % per == 0, "a run must be whole 16-byte vectors");
  if (valid == V) {
    uint4* q = reinterpret_cast<uint4*>(p);
#pragma unroll
    for (int i = 0; i < V / per; ++i) {
      uint4 w;
      if constexpr (std::is_same<T, bfloat16_t>::value) {  // two values per conversion, same rounding
        __nv_bfloat162* e = reinterpret_cast<__nv_bfloat162*>(&w);
#pragma unroll
        for (int j = 0; j < per / 2; ++j) e[j] = __floats2bfloat162_rn(v[i * per + 2 * j], v[i * per + 2 * j + 1]);
      } else if constexpr (std::is_same<T, half_t>::value) {
        __half2* e = reinterpret_cast<__half2*>(&w);
#pragma unroll
        for (int j = 0; j < per / 2; ++j) e[j] = __floats2half2_rn(v[i * per + 2 * j], v[i * per + 2 * j + 1]);
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

/// Load W 32-bit words, widest first (the twin of store_words).
template <int W, cub::CacheLoadModifier M = cub::LOAD_DEFAULT>
__device__ __forceinline__ void load_words(const void* src, uint32_t (&w)[W]) {
  if constexpr (W % 4 == 0) {
#pragma unroll
    for (int i = 0; i < W / 4; ++i) {
      const uint4 v = cub::ThreadLoad<M>(static_cast<uint4*>(const_cast<void*>(src)) + i);
      w[4 * i] = v.x, w[4 * i + 1] = v.y, w[4 * i + 2] = v.z, w[4 * i + 3] = v.w;
    }
  } else if constexpr (W % 2 == 0) {
#pragma unroll
    for (int i = 0; i < W / 2; ++i) {
      const uint2 v = cub::ThreadLoad<M>(static_cast<uint2*>(const_cast<void*>(src)) + i);
      w[2 * i] = v.x, w[2 * i + 1] = v.y;
    }
  } else {
#pragma unroll
    for (int i = 0; i < W; ++i) w[i] = cub::ThreadLoad<M>(static_cast<uint32_t*>(const_cast<void*>(src)) + i);
  }
}

#endif

}  // namespace echo::detail
