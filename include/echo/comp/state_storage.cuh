// How a chain keeps its stored errors: state_storage<S> for S in {float, bfloat16_t, half_t,
// int8_state, int4_state}. Host (the reference) and device (the pipeline) share the numerics.
#pragma once

#include "../detail/ceil_div.cuh"
#include "../detail/vector_io.cuh"
#include "../dtype.cuh"
#include "../quant/packet.cuh"
#include "../quant/symmetric.cuh"

#include <type_traits>

namespace echo::comp {

/// The error kept as Bits-bit codes on a symmetric grid per 32 consecutive values (elements
/// [32k, 32k + 32) of the message), with the group's own fp16 step: quant::symmetric<Bits, 32>
/// applied to the errors. The step follows the group's largest error, so the codes lose about
/// 1 / (2^Bits - 2) of it: a fraction of a percent of one call's error at 8 bits. State costs
/// Bits / 8 + 1 / 16 bytes a value instead of 2 (bf16) or 4 (fp32).
template <int Bits>
struct int_state {
  static_assert(Bits == 4 || Bits == 8, "echo::comp::int_state: Bits must be 4 or 8");
  static constexpr int bits = Bits;
};
using int8_state = int_state<8>;
using int4_state = int_state<4>;

namespace detail {
ECHO_HD constexpr size_t align16(size_t b) { return (b + 15) & ~size_t(15); }
}  // namespace detail

template <class S, class = void>
struct state_storage;

/// Element storage: the error rounded to S (nearest even).
template <class S>
struct state_storage<S, std::enable_if_t<is_element<S>::value>> {
  static size_t bytes(size_t n) { return detail::align16(n * sizeof(S)); }

  /// Host: what a stored error reads back as, for e[0..n) of a message.
  static void round_trip(const float* e, size_t n, float* out) {
    for (size_t i = 0; i < n; ++i) out[i] = element_traits<S>::to_float(element_traits<S>::from_float(e[i]));
  }

#if ECHO_HAS_CUDA
  template <int V>
  using raw = echo::detail::raw_run<S, V>;

  template <int V>
  __device__ __forceinline__ static raw<V> load(const unsigned char* data, size_t, size_t first, int valid) {
    return echo::detail::load_raw<S, V>(reinterpret_cast<const S*>(data) + first, valid);
  }
  template <int V>
  __device__ __forceinline__ static void widen(const raw<V>& r, float (&c)[V]) {
    echo::detail::widen(r, c);
  }
  /// Ask L2 for the stored errors of elements [first, first + count) (first a multiple of 8).
  __device__ __forceinline__ static void prefetch(const unsigned char* data, size_t, size_t first, size_t count) {
    echo::detail::prefetch_l2(reinterpret_cast<const S*>(data) + first, static_cast<uint32_t>(count * sizeof(S)) & ~15u);
  }
  /// Every lane of the warp calls it (int_state needs its neighbours); valid = 0 stores nothing.
  /// data: the chain's storage laid out for a message of n elements; first: the lane's first element.
  template <int V>
  __device__ __forceinline__ static void store(unsigned char* data, size_t, size_t first, int valid, const float (&e)[V]) {
    if (valid > 0) echo::detail::store_floats<S, V>(reinterpret_cast<S*>(data) + first, valid, e);
  }
#endif
};

/// Coded storage, laid out for the message's n: [ codes, Bits a value, padded to 16 B | the fp16
/// step of each group of 32 ]. A call with another n starts a fresh chain, so the layout of the
/// current n is the only one the storage ever holds.
template <int Bits>
struct state_storage<int_state<Bits>> {
  using grid = quant::symmetric<Bits, 32>;
  using codes = quant::packet<grid>;
  static constexpr int group = 32;

  ECHO_HD static size_t code_bytes(size_t n) { return detail::align16((n * Bits + 7) / 8); }
  static size_t bytes(size_t n) { return code_bytes(n) + detail::align16(echo::detail::ceil_div(n, group) * 2); }

  static void round_trip(const float* e, size_t n, float* out) {
    for (size_t b = 0; b < n; b += group) {
      const size_t len = n - b < size_t(group) ? n - b : size_t(group);
      quant::group_stats st = quant::group_stats::empty();
      for (size_t i = 0; i < len; ++i) st.add(e[b + i]);
      const quant::group_params p = grid::unpack(grid::fit(st));
      for (size_t i = 0; i < len; ++i) out[b + i] = grid::decode(grid::encode(e[b + i], p), p);
    }
  }

#if ECHO_HAS_CUDA
  template <int V>
  struct raw {
    static_assert(V * Bits % 32 == 0 && group % V == 0, "int_state: a lane's values are whole words of one group");
    uint32_t w[V * Bits / 32];
    uint16_t step;
  };

  template <int V>
  __device__ __forceinline__ static raw<V> load(const unsigned char* data, size_t n, size_t first, int valid) {
    raw<V> r;
    const unsigned char* at = data + first * Bits / 8;
    if (valid == V) {
      echo::detail::load_words<V * Bits / 32>(at, r.w);  // written by this rank's earlier launch
    } else {
#pragma unroll
      for (int i = 0; i < V * Bits / 32; ++i) r.w[i] = i * 32 < valid * Bits ? reinterpret_cast<const uint32_t*>(at)[i] : 0u;
    }
    r.step = valid > 0 ? reinterpret_cast<const uint16_t*>(data + code_bytes(n))[first / group] : uint16_t(0);
    return r;
  }

  /// Ask L2 for the codes of elements [first, first + count) (first a multiple of 32).
  __device__ __forceinline__ static void prefetch(const unsigned char* data, size_t, size_t first, size_t count) {
    echo::detail::prefetch_l2(data + first * Bits / 8, static_cast<uint32_t>(count * Bits / 8) & ~15u);
  }

  template <int V>
  __device__ __forceinline__ static void widen(const raw<V>& r, float (&c)[V]) {
    const quant::group_params p = grid::unpack({r.step, 0});
#pragma unroll
    for (int i = 0; i < V; ++i) c[i] = grid::decode(codes::get_code(r.w, i), p);
  }

  /// The codes are quant::packet's (a byte permute a value for 8 bits, an and-or for 4), and a
  /// full lane tests nothing per value: absent values of a tail lane are kept out of the group's
  /// range and their codes masked to 0 once.
  template <int V>
  __device__ __forceinline__ static void store(unsigned char* data, size_t n, size_t first, int valid, const float (&e)[V]) {
    constexpr int lanes = group / V;  // neighbouring lanes that share a group
    float lo = 0.0f, hi = 0.0f;       // absent values count as 0: they do not widen the range
    if (valid == V) {
#pragma unroll
      for (int i = 0; i < V; ++i) lo = fminf(lo, e[i]), hi = fmaxf(hi, e[i]);
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i)
        if (i < valid) lo = fminf(lo, e[i]), hi = fmaxf(hi, e[i]);
    }
#pragma unroll
    for (int off = 1; off < lanes; off <<= 1) {
      lo = fminf(lo, __shfl_xor_sync(0xffffffffu, lo, off));
      hi = fmaxf(hi, __shfl_xor_sync(0xffffffffu, hi, off));
    }
    const quant::wire_params w = grid::fit({lo, hi, true});
    const quant::group_params p = grid::unpack(w);
    uint32_t words[V * Bits / 32] = {};
#pragma unroll
    for (int i = 0; i < V; ++i) codes::put_code(words, i, grid::encode(e[i], p));
    if (valid <= 0) return;
    unsigned char* at = data + first * Bits / 8;
    if (valid == V) {
      echo::detail::store_words<V * Bits / 32>(at, words);
    } else {
#pragma unroll
      for (int i = 0; i < V * Bits / 32; ++i)
        if (i * 32 < valid * Bits) {
          const int kept = valid * Bits - 32 * i;  // bits of word i that hold present values
          reinterpret_cast<uint32_t*>(at)[i] = words[i] & (kept >= 32 ? ~0u : (1u << kept) - 1u);
        }
    }
    if (first % group == 0) reinterpret_cast<uint16_t*>(data + code_bytes(n))[first / group] = w.p0;
  }
#endif
};

}  // namespace echo::comp
