// group_transform<Q, V>: a quantizer's group transform (quant::transform_of) as the lanes of a warp
// apply it, a group spread over LANES = Q::group / V consecutive lanes of V values each. The
// butterfly stages of bits below log2(V) run inside a lane, the others across lanes with shuffles;
// every stage does the operations quant::hadamard does on the host, in the same order, so both
// give the same bits whatever V is. For a quantizer without a transform every member does nothing.
#pragma once

#include "../detail/fp_ops.cuh"
#include "../quant/transform.cuh"

#include <type_traits>

namespace echo::collective {

#if ECHO_HAS_CUDA

template <class Q, int V, class Transform = quant::transform_of_t<Q>, class = void>
struct group_transform {
  static constexpr bool active = false;
  __device__ __forceinline__ static bool whole(int, int) { return false; }
  __device__ __forceinline__ static void forward(float (&)[V], int, bool) {}
  __device__ __forceinline__ static void inverse_scaled(float (&)[V], int, bool) {}
};

template <class Q, int V, class Transform>
struct group_transform<Q, V, Transform, std::enable_if_t<Transform::active>> {
  using H = Transform;
  static constexpr bool active = true;
  static constexpr int G = H::size;
  static constexpr int LANES = G / V;
  static_assert(G % V == 0 && V % 16 == 0 && LANES >= 1 && LANES <= 32,
                "echo::collective::group_transform: a lane holds a whole number of 16-value blocks of a group");

  /// Whether the group of this lane is whole (every lane of it holds V present values): only whole
  /// groups are transformed. Every lane of the warp calls it.
  __device__ __forceinline__ static bool whole(int valid, int lane) {
    const unsigned full = __ballot_sync(0xffffffffu, valid == V);
    const unsigned mask = (LANES == 32 ? 0xffffffffu : (1u << LANES) - 1u) << (lane & ~(LANES - 1));
    return (full & mask) == mask;
  }

  /// y = H (s x) of this lane's share where the lane's group is whole (whole(): the same for
  /// every lane of a group), x unchanged elsewhere. Every lane of the warp calls it: the shuffles
  /// run on all lanes, so a warp whose groups differ in wholeness (a message's tail) stays
  /// converged.
  __device__ __forceinline__ static void forward(float (&x)[V], int lane, bool whole) {
    if (whole) {
      signs(x, lane);
      lane_stages(x);
    }
    cross_stages(x, lane, whole);
  }
  /// x = s (H y) of this lane's share of y / G, under the same rules.
  __device__ __forceinline__ static void inverse_scaled(float (&y)[V], int lane, bool whole) {
    if (whole) lane_stages(y);
    cross_stages(y, lane, whole);
    if (whole) signs(y, lane);
  }

 private:
  /// x_i = s_i x_i: the sign bit flipped where s_i is -1; s_i's high part (of i / 16) is the
  /// lane's, its low part (of i mod 16) a constant, so one operation a value.
  __device__ __forceinline__ static void signs(float (&x)[V], int lane) {
    const int first16 = (lane % LANES) * (V / 16);  // i / 16 of the lane's first value
    uint32_t high[V / 16];
#pragma unroll
    for (int k = 0; k < V / 16; ++k) high[k] = H::negative_high(first16 + k) ? 0x80000000u : 0u;
#pragma unroll
    for (int v = 0; v < V; ++v)
      x[v] = __uint_as_float(__float_as_uint(x[v]) ^ high[v / 16] ^ (H::negative_low(v % 16) ? 0x80000000u : 0u));
  }

  /// The stages as template recursion, not a loop over h <<= 1: nvcc does not unroll a loop
  /// whose step doubles, and the indices it left to run time put the lane's values on the stack
  /// (192 bytes a thread and 40 local loads a lane's values in the push kernel: 4x its time).
  template <int Hs = 1>
  __device__ __forceinline__ static void lane_stages(float (&x)[V]) {
    if constexpr (Hs < V) {
#pragma unroll
      for (int i = 0; i < V; i += 2 * Hs)
#pragma unroll
        for (int k = i; k < i + Hs; ++k) {
          const float a = x[k], c = x[k + Hs];
          x[k] = echo::detail::add_rn(a, c);
          x[k + Hs] = echo::detail::sub_rn(a, c);
        }
      lane_stages<2 * Hs>(x);
    }
  }
  /// Across lanes: the lane whose bit is clear holds a, its partner c; a + c and a - c are each
  /// one fma of the own value with +1 or -1 and the partner's (exact products, one rounding).
  template <int O = 1>
  __device__ __forceinline__ static void cross_stages(float (&x)[V], int lane, bool whole) {
    if constexpr (O < LANES) {
      const float s = (lane & O) ? -1.0f : 1.0f;
#pragma unroll
      for (int v = 0; v < V; ++v) {
        const float partner = __shfl_xor_sync(0xffffffffu, x[v], O);
        if (whole) x[v] = echo::detail::fma_rn(x[v], s, partner);
      }
      cross_stages<2 * O>(x, lane, whole);
    }
  }
};

#endif

}  // namespace echo::collective
