// How a chain keeps its stored errors: state_storage<S> for S in {float, bfloat16_t, half_t,
// int8_state, int4_state, step8_state, step4_state}. Host (the reference) and device (the
// pipeline) share the numerics.
#pragma once

#include "../detail/ceil_div.cuh"
#include "../detail/vector_io.cuh"
#include "../dtype.cuh"
#include "../quant/packet.cuh"
#include "../quant/symmetric.cuh"

#include <cmath>
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

/// The error in units of the step of the data group that made it (the compact state):
/// code = clamp(rint(e / step * 2^(Bits-1))) on a symmetric Bits-bit grid, plus that group's fp16
/// step once per 32 values: 1 + 1/16 (or 1/2 + 1/16) bytes a value like int_state, but no fit and
/// no shuffles, since the step and its reciprocal are already in registers. A quantized call's
/// error is half a step of its grid, plus, for the own segment, half an ulp of the output type;
/// with bf16 output that came to at most 0.55 / 0.73 / 0.96 / 1.45 steps for zero_aware 4 / 6
/// bits, symmetric 8 and zero_aware 8 (measured over random groups). The codes hold +-0.99 steps
/// (8 bits) or +-0.875 (4 bits); beyond, they clamp (defined, the same on device and host): for
/// step8 only the bf16-rounded top values of off-centre 8-bit groups (0.2 % of the owner's
/// errors there) and groups whose fp16 scale saturated. What is not fed forward is the codes'
/// rounding, 1 / 2^(Bits-1) of one call's error (rms): 0.8 % for 8 bits, 12.5 % for 4;
/// docs/quality.md measures what that does along depth. A call that does not quantize
/// (quant::none through the pipeline) has no data step: it fits one to its own errors per 32 and
/// stores it the same way, with the fp16 step capped at 65504 (errors beyond about 6.5e4 clamp,
/// where int_state holds about 8e6). A quantizer whose grid does not hold zero
/// (quant::group_contract::holds_zero false: naive_zero_point) takes that own-step path too: a
/// group far from zero decodes far from it, and rounding that to bf16 can err by many steps.
template <int Bits>
struct step_state {
  static_assert(Bits == 4 || Bits == 8, "echo::comp::step_state: Bits must be 4 or 8");
  static constexpr int bits = Bits;
};
using step8_state = step_state<8>;
using step4_state = step_state<4>;

namespace detail {
ECHO_HD constexpr size_t align16(size_t b) { return (b + 15) & ~size_t(15); }
}  // namespace detail

template <class S, class = void>
struct state_storage;

/// Element storage: the error rounded to S (nearest even).
template <class S>
struct state_storage<S, std::enable_if_t<is_element<S>::value>> {
  /// Names the storage in the construction check: ranks built with storages whose state differs
  /// in bits must not pass it (bf16 and half take the same bytes).
  static constexpr const char* name = element_traits<S>::tag == dtype::f32   ? "f32"
                                      : element_traits<S>::tag == dtype::f16 ? "f16"
                                                                             : "bf16";
  static constexpr bool data_step = false;
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
  /// x += the stored errors (one rounding).
  template <int V>
  __device__ __forceinline__ static void add(const raw<V>& r, float (&x)[V]) {
    float c[V];
    echo::detail::widen(r, c);
#pragma unroll
    for (int i = 0; i < V; ++i) x[i] = echo::detail::add_rn(x[i], c[i]);
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

namespace detail {

/// The layout both coded storages share, for a message of n elements: [ codes, Bits a value,
/// padded to 16 B | an fp16 step per 32 values ]. A call with another n starts a fresh chain, so
/// the layout of the current n is the only one the storage ever holds.
template <int Bits>
struct coded_layout {
  using grid = quant::symmetric<Bits, 32>;
  using codes = quant::packet<grid>;
  static constexpr int group = 32;

  ECHO_HD static size_t code_bytes(size_t n) { return align16((n * Bits + 7) / 8); }
  static size_t bytes(size_t n) { return code_bytes(n) + align16(echo::detail::ceil_div(n, group) * 2); }

  /// Host: the codes of e[b, b + len) on grid p, as they read back.
  static void round_trip_run(const float* e, size_t len, const quant::group_params& p, float* out) {
    for (size_t i = 0; i < len; ++i) out[i] = grid::decode(grid::encode(e[i], p), p);
  }

#if ECHO_HAS_CUDA
  template <int V>
  struct raw {
    static_assert(V * Bits % 32 == 0 && group % V == 0, "coded state: a lane's values are whole words of one group");
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

  /// Codes of e on grid p in quant::packet's order (quant::packet::put_codes: byte permutes),
  /// written for the `valid` present values; the lane that starts a group of 32 writes its step. A full lane tests nothing per value. `in_range`: the caller knows every
  /// e[i] encodes without clamping (each position within the codes), so the clamp, the identity
  /// then, is skipped: the same codes, two operations a value fewer.
  template <int V>
  __device__ __forceinline__ static void write(unsigned char* data, size_t n, size_t first, int valid, const float (&e)[V],
                                               const quant::group_params& p, uint16_t step, bool in_range = false) {
    uint32_t words[V * Bits / 32] = {}, c[V];
    if (in_range) {
#pragma unroll
      for (int i = 0; i < V; ++i) c[i] = __float_as_uint(grid::position(e[i], p));
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i) c[i] = grid::encode(e[i], p);
    }
    codes::put_codes(words, c);
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
    if (first % group == 0) reinterpret_cast<uint16_t*>(data + code_bytes(n))[first / group] = step;
  }

  /// The largest |e| over the `valid` present values of the group of 32 this lane shares with
  /// its neighbours (absent values count as 0: they do not widen the range).
  template <int V>
  __device__ __forceinline__ static float group_max(const float (&e)[V], int valid) {
    float m = 0.0f;
    if (valid == V) {
#pragma unroll
      for (int i = 0; i < V; ++i) m = fmaxf(m, fabsf(e[i]));
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i)
        if (i < valid) m = fmaxf(m, fabsf(e[i]));
    }
#pragma unroll
    for (int off = 1; off < group / V; off <<= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    return m;
  }
#endif
};

}  // namespace detail

/// int_state: the codes of quant::symmetric<Bits, 32> applied to the errors, with the fp16 step of
/// the errors' own group.
template <int Bits>
struct state_storage<int_state<Bits>> : detail::coded_layout<Bits> {
  static constexpr const char* name = Bits == 8 ? "int8" : "int4";
  using layout = detail::coded_layout<Bits>;
  using grid = typename layout::grid;
  static constexpr int group = layout::group;
  static constexpr bool data_step = false;

  static void round_trip(const float* e, size_t n, float* out) {
    for (size_t b = 0; b < n; b += group) {
      const size_t len = n - b < size_t(group) ? n - b : size_t(group);
      quant::group_stats st = quant::group_stats::empty();
      for (size_t i = 0; i < len; ++i) st.add(e[b + i]);
      layout::round_trip_run(e + b, len, grid::unpack(grid::fit(st)), out + b);
    }
  }

#if ECHO_HAS_CUDA
  template <int V>
  using raw = typename layout::template raw<V>;

  /// x += the stored errors (one rounding: the read-back error is exact in fp32).
  template <int V>
  __device__ __forceinline__ static void add(const raw<V>& r, float (&x)[V]) {
    const quant::group_params p = grid::unpack({r.step, 0});
#pragma unroll
    for (int i = 0; i < V; ++i) x[i] = echo::detail::add_rn(x[i], grid::decode(layout::codes::get_code(r.w, i), p));
  }

  /// Every lane of the warp calls it (the group's range comes from its neighbours).
  template <int V>
  __device__ __forceinline__ static void store(unsigned char* data, size_t n, size_t first, int valid, const float (&e)[V]) {
    const float m = layout::group_max(e, valid);
    const quant::wire_params w = grid::fit({-m, m, true});
    layout::write(data, n, first, valid, e, grid::unpack(w), w.p0);
  }
#endif
};

/// step_state: the codes on a grid of step / 2^(Bits-1), the step being the data group's.
template <int Bits>
struct state_storage<step_state<Bits>> : detail::coded_layout<Bits> {
  static constexpr const char* name = Bits == 8 ? "step8" : "step4";
  using layout = detail::coded_layout<Bits>;
  using grid = typename layout::grid;
  static constexpr int group = layout::group;
  static constexpr bool data_step = true;
  static constexpr float units = static_cast<float>(1 << (Bits - 1));  ///< codes a step
  static constexpr float unit = 1.0f / units;

  /// The grid of codes for a group of step s (inv: 1 / s rounded, 0 when s is 0 or the group is
  /// not finite): both scalings by a power of two are exact.
  ECHO_HD static quant::group_params grid_of(float s, float inv) {
    return {echo::detail::mul_rn(s, unit), echo::detail::mul_rn(inv, units), grid::code_offset,
            echo::detail::add_rn(echo::detail::code_magic, grid::code_offset), true};
  }
  ECHO_HD static quant::group_params grid_of(const quant::group_params& data) {
    return data.finite ? grid_of(data.scale, data.inv) : grid_of(0.0f, 0.0f);
  }
  /// No data step (a call that does not quantize): the step of the errors' own range, per 32.
  ECHO_HD static uint16_t own_step(float max_abs) {
    return quant::detail::scale_bits(echo::detail::mul_rn(echo::detail::div_rn(max_abs, grid::code_offset - 1.0f), units));
  }
  ECHO_HD static quant::group_params grid_of_bits(uint16_t step) {
    const float s = echo::detail::half_bits_to_float(step);
    return grid_of(s, s > 0.0f ? echo::detail::rcp_rn(s) : 0.0f);
  }

  /// Host, a call that does not quantize.
  static void round_trip(const float* e, size_t n, float* out) {
    for (size_t b = 0; b < n; b += group) {
      const size_t len = n - b < size_t(group) ? n - b : size_t(group);
      float m = 0.0f;
      for (size_t i = 0; i < len; ++i) m = echo::detail::fmax2(m, std::fabs(e[b + i]));
      layout::round_trip_run(e + b, len, grid_of_bits(own_step(m)), out + b);
    }
  }
  /// Host, a quantized call: data[k] is the parameters of the data group that holds elements
  /// [32k, 32k + 32) (every data group is a whole number of 32s, aligned).
  static void round_trip(const float* e, size_t n, const quant::group_params* data, float* out) {
    for (size_t b = 0; b < n; b += group) {
      const size_t len = n - b < size_t(group) ? n - b : size_t(group);
      layout::round_trip_run(e + b, len, grid_of(data[b / group]), out + b);
    }
  }

#if ECHO_HAS_CUDA
  template <int V>
  using raw = typename layout::template raw<V>;

  /// x += the stored errors: q * (step / units) is exact, so one fma rounds once, as the
  /// reference's x + e does. (The code's bias comes from grid_of, an operation at run time: as a
  /// compile-time constant it made ptxas spill 52 / 108 bytes instead of 20 / 36 under the heavy
  /// policy, for the same values.)
  template <int V>
  __device__ __forceinline__ static void add(const raw<V>& r, float (&x)[V]) {
    const quant::group_params p = grid_of(echo::detail::half_bits_to_float(r.step), 0.0f);
#pragma unroll
    for (int i = 0; i < V; ++i)
      x[i] = echo::detail::fma_rn(echo::detail::sub_rn(echo::detail::biased_float(layout::codes::get_code(r.w, i)), p.bias),
                                  p.scale, x[i]);
  }

  /// A call that does not quantize: every lane of the warp calls it.
  template <int V>
  __device__ __forceinline__ static void store(unsigned char* data, size_t n, size_t first, int valid, const float (&e)[V]) {
    const uint16_t step = own_step(layout::group_max(e, valid));
    layout::write(data, n, first, valid, e, grid_of_bits(step), step);
  }
  /// A quantized call: w and p are the wire and widened parameters of the lane's data group.
  /// `in_range`: every |e[i]| is known to be at most 0.75 steps (within the codes' +-0.99 for
  /// step8, +-0.875 for step4), so none clamps (tile_stages::keep_errors says when).
  template <int V>
  __device__ __forceinline__ static void store(unsigned char* data, size_t n, size_t first, int valid, const float (&e)[V],
                                               const quant::wire_params& w, const quant::group_params& p,
                                               bool in_range = false) {
    layout::write(data, n, first, valid, e, grid_of(p), p.finite ? w.p0 : uint16_t(0), in_range);
  }
#endif
};

/// Whether compensator Comp stores its errors in units of their data group's step.
template <class Comp, bool = Comp::keeps_state>
struct stores_in_data_steps : std::false_type {};
template <class Comp>
struct stores_in_data_steps<Comp, true> : std::integral_constant<bool, state_storage<typename Comp::storage>::data_step> {};

}  // namespace echo::comp
