// Where a kernel stores its values of the all-reduce. Plain: out <- T(a). With the residual +
// RMSNorm epilogue: residual <- T(residual + T(a)) at once, the epilogue's first step, which is
// elementwise and so needs no whole row; out is then written only by the rows' normalisation
// (rows.cuh, pass::norm). That saves the epilogue's read of out and its write of the residual
// (two of the five passes over the message an unfused pair makes), with the same bits.
#pragma once

#include "../detail/fp_ops.cuh"
#include "../detail/vector_io.cuh"
#include "../dtype.cuh"

namespace echo::epilogue {

#if ECHO_HAS_CUDA

template <class T>
struct destination {
  T* out = nullptr;
  T* residual = nullptr;  ///< non-null: the values go into the residual instead of out

  /// The lane's `valid` values (0..V) of the all-reduce at message index `first`. The residual's
  /// values at [first, first + valid) are this lane's alone in the call.
  template <int V>
  __device__ __forceinline__ void store(size_t first, int valid, const float (&v)[V]) const {
    if (residual == nullptr) {
      echo::detail::store_floats<T, V>(out + first, valid, v);
      return;
    }
    // A 16-byte vector at a time: few values live beside v (the plain calls run this kernel too,
    // so its registers are theirs).
    auto sum = [&](T r, float x) {
      return echo::detail::add_rn(element_traits<T>::to_float(r), element_traits<T>::to_float(element_traits<T>::from_float(x)));
    };
    constexpr int per = 16 / static_cast<int>(sizeof(T));
    if (valid == V) {
#pragma unroll
      for (int i = 0; i < V / per; ++i) {
        const auto raw = echo::detail::load_raw<T, per>(residual + first + i * per, per);
        const T* r = reinterpret_cast<const T*>(raw.w);
        float y[per];
#pragma unroll
        for (int j = 0; j < per; ++j) y[j] = sum(r[j], v[i * per + j]);
        echo::detail::store_floats<T, per>(residual + first + i * per, per, y);
      }
    } else {
#pragma unroll
      for (int k = 0; k < V; ++k)
        if (k < valid) residual[first + k] = element_traits<T>::from_float(sum(residual[first + k], v[k]));
    }
  }
};

#endif

}  // namespace echo::epilogue
