// tile_codec<Q, T>: how the lanes of a warp turn their values into a packet and back.
//
// A sub-tile is 32 lanes x V consecutive values; its packet is quant::packet<Q> of 32 / LANES
// groups (raw T values for quant::none). Each lane quantizes its V values (quantize), writes its
// share of the packet (store), and reads and dequantizes its share of a peer's packet (load).
// The arithmetic is the policy's own (Q::fit / encode / decode), so the device stays bit-identical
// to echo::reference; what this file adds is only who computes what:
//   - a group's statistics come from NaN-propagating min / max (one operation a value each), and
//     the group is non-finite when they are: the same verdict as the reference's per-value test;
//   - the LANES lanes of a group each fit it (per lane, not per value: V values share the cost).
#pragma once

#include "../detail/vector_io.cuh"
#include "../quant/packet.cuh"

#include <cstring>
#include <type_traits>

namespace echo::collective {

#if ECHO_HAS_CUDA

namespace detail {

/// min / max that return NaN when either operand is NaN (the reference tracks finiteness per
/// value instead; both declare a group with a NaN or Inf non-finite).
__device__ __forceinline__ float fmin_nan(float a, float b) {
#if __CUDA_ARCH__ >= 800
  float r;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return (a != a || b != b) ? __int_as_float(0x7fffffff) : fminf(a, b);
#endif
}
__device__ __forceinline__ float fmax_nan(float a, float b) {
#if __CUDA_ARCH__ >= 800
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return (a != a || b != b) ? __int_as_float(0x7fffffff) : fmaxf(a, b);
#endif
}

/// The same for each 16-bit half of a pair of bf16 or fp16 values (sm_80 and later; Max: max,
/// else min): a lane's statistics in one operation per two values, on values widened exactly to
/// fp32 afterwards.
template <class T, bool Max>
__device__ __forceinline__ uint32_t pair_extreme_nan(uint32_t a, uint32_t b) {
  using pair = std::conditional_t<std::is_same<T, bfloat16_t>::value, __nv_bfloat162, __half2>;
  static_assert(sizeof(pair) == 4, "two 16-bit values");
  pair x, y, r;
  memcpy(&x, &a, 4);
  memcpy(&y, &b, 4);
  r = Max ? __hmax2_nan(x, y) : __hmin2_nan(x, y);
  uint32_t u;
  memcpy(&u, &r, 4);
  return u;
}

/// Folds w[0..N) with op as a balanced tree (a chain would serialise N - 1 dependent operations).
template <int N, class Op>
__device__ __forceinline__ uint32_t fold_tree(const uint32_t* w, Op op) {
  if constexpr (N == 1) {
    return w[0];
  } else {
    return op(fold_tree<N / 2>(w, op), fold_tree<N - N / 2>(w + N / 2, op));
  }
}

}  // namespace detail

template <class Q, class T, int LaneValues, class = void>
struct tile_codec;

/// Group quantizers. V values a lane: LaneValues (16 or 32; at most 16 above 4 bits, so that a
/// lane's codes are at most 16 bytes: 8-bit at 32 values a lane under the lean wide policy ran
/// 1.51x NCCL at 1 GiB against 1.79x at 16 under the heavy one; at most 16 for 4-byte elements,
/// whose 32 a lane spill at 128 registers: 60-312 bytes; docs/tuning.md), raised to the fewest
/// values whose codes fill whole 32-bit words (32 for 3 bits);
/// LANES = g / V consecutive lanes share a group.
template <class Q, class T, int LaneValues>
struct tile_codec<Q, T, LaneValues, std::enable_if_t<Q::quantizes>> {
  static constexpr int bits = Q::bits;
  static constexpr int unit = 32 / (bits & -bits);
  static constexpr int wanted = bits <= 4 && sizeof(T) <= 2 ? LaneValues : 16;
  static constexpr int V = unit > wanted ? unit : wanted;
  static constexpr int LANES = Q::group / V;
  static constexpr int WORDS = V * bits / 32;
  static_assert(V * bits % 32 == 0 && Q::group % V == 0 && LANES <= 32 && (LANES & (LANES - 1)) == 0,
                "echo::collective::tile_codec: thread layout");
  using pk = quant::packet<Q>;

  /// Bytes of the packet of a sub-tile of 32 lanes.
  __host__ __device__ static constexpr size_t sub_tile_bytes() { return pk::bytes(32 / LANES); }

  /// One lane's share of a packet.
  struct packed {
    uint32_t words[WORDS];
    quant::wire_params w;
  };

  /// A lane's statistics: NaN-propagating min and max of its present values (+Inf and -Inf for
  /// a lane with none).
  struct lane_range {
    float lo, hi;
  };

  __device__ __forceinline__ static lane_range range(const float (&x)[V], int valid) {
    lane_range r{INFINITY, -INFINITY};
    if (valid == V) {
#pragma unroll
      for (int i = 0; i < V; ++i) r.lo = detail::fmin_nan(r.lo, x[i]), r.hi = detail::fmax_nan(r.hi, x[i]);
    } else {
#pragma unroll
      for (int i = 0; i < V; ++i)
        if (i < valid) r.lo = detail::fmin_nan(r.lo, x[i]), r.hi = detail::fmax_nan(r.hi, x[i]);
    }
    return r;
  }

  /// The same from the values as loaded (x: the same values widened): a full lane of bf16 or
  /// fp16 takes them two at a time, in their own type (exact: a min of two values is one of
  /// them, and widening is exact and monotonic), so its statistics cost one operation per two
  /// values instead of one per value; other lanes and types take range(x).
  __device__ __forceinline__ static lane_range range(const echo::detail::raw_run<T, V>& raw, const float (&x)[V],
                                                     int valid) {
#if __CUDA_ARCH__ >= 800
    if constexpr (sizeof(T) == 2 && (std::is_same<T, bfloat16_t>::value || std::is_same<T, half_t>::value)) {
      if (valid == V) {
        constexpr int N = V / 2;
        const uint32_t* w = reinterpret_cast<const uint32_t*>(raw.w);
        const uint32_t mn = detail::fold_tree<N>(w, [](uint32_t a, uint32_t b) { return detail::pair_extreme_nan<T, false>(a, b); });
        const uint32_t mx = detail::fold_tree<N>(w, [](uint32_t a, uint32_t b) { return detail::pair_extreme_nan<T, true>(a, b); });
        const auto widen = [](uint32_t pair, int half) {
          return element_traits<T>::to_float(T{static_cast<uint16_t>(half ? pair >> 16 : pair & 0xFFFFu)});
        };
        return {detail::fmin_nan(widen(mn, 0), widen(mn, 1)), detail::fmax_nan(widen(mx, 0), widen(mx, 1))};
      }
    }
#endif
    return range(x, valid);
  }

  /// Quantize this lane's values (the first `valid` are present); dq receives D(Q(x)),
  /// `params` (if given) the group's widened parameters, and `fits` (if given) whether this lane
  /// took the clamp-free path: all V values present and every value of the group on the grid, so
  /// |x - D(Q(x))| <= step / 2 for each. Every lane of the warp calls it (a group's statistics
  /// are reduced over its lanes with shuffles).
  /// Per value: min, max, then the policy's encode (an fma and a clamp) and a shift-or into the
  /// words; what the tail needs (absent values out of the statistics, their codes zeroed) is
  /// done apart, so a full lane tests nothing per value.
  __device__ __forceinline__ static packed quantize(const float (&x)[V], int valid, float (&dq)[V],
                                                    quant::group_params* params = nullptr, bool* fits = nullptr) {
    return quantize(range(x, valid), x, valid, dq, params, fits);
  }

  /// The same with the lane's statistics already taken (range).
  __device__ __forceinline__ static packed quantize(lane_range lr, const float (&x)[V], int valid, float (&dq)[V],
                                                    quant::group_params* params = nullptr, bool* fits = nullptr) {
    float lo = lr.lo, hi = lr.hi;
#pragma unroll
    for (int off = 1; off < LANES; off <<= 1) {
      lo = detail::fmin_nan(lo, __shfl_xor_sync(0xffffffffu, lo, off));
      hi = detail::fmax_nan(hi, __shfl_xor_sync(0xffffffffu, hi, off));
    }
    // A group with no value present (beyond n) is empty: finite, as in the reference.
    const bool finite = (isfinite(lo) && isfinite(hi)) || (lo == INFINITY && hi == -INFINITY);
    packed r;
    r.w = Q::fit({lo, hi, finite});
    const quant::group_params p = Q::unpack(r.w);
    if (params) *params = p;
#pragma unroll
    for (int k = 0; k < WORDS; ++k) r.words[k] = 0;
    if (valid == V && on_grid(lo, hi, p)) {
      // Every value of the group lands on the grid, so encode's clamp would return its position
      // unchanged: the same codes, two operations a value fewer.
      if (fits) *fits = true;
      uint32_t q[V];
#pragma unroll
      for (int i = 0; i < V; ++i) {
        q[i] = __float_as_uint(Q::position(x[i], p));
        dq[i] = Q::decode(q[i], p);
      }
      pk::put_codes(r.words, q);
      return r;
    }
    if (fits) *fits = false;
    uint32_t q[V];
#pragma unroll
    for (int i = 0; i < V; ++i) {
      q[i] = Q::encode(x[i], p);  // a non-finite group codes to 0 (quant::detail::unpacked)
      dq[i] = Q::decode(q[i], p);
    }
    pk::put_codes(r.words, q);
    if (valid < V) {  // padding codes are 0, as the reference writes them
#pragma unroll
      for (int k = 0; k < WORDS; ++k) {
        const int kept = valid * bits - 32 * k;  // bits of word k that hold present values
        r.words[k] &= kept >= 32 ? ~0u : kept <= 0 ? 0u : (1u << kept) - 1u;
      }
    }
    return r;
  }

  /// Whether every value in [lo, hi] (a group's statistics) encodes without clamping: true when
  /// its extremes do, since a finite group's position is non-decreasing in x. False for a
  /// non-finite group (NaN statistics compare false).
  __device__ __forceinline__ static bool on_grid(float lo, float hi, const quant::group_params& p) {
    return p.finite && Q::position(lo, p) >= echo::detail::code_magic &&
           Q::position(hi, p) <= echo::detail::code_magic + static_cast<float>(Q::max_code);
  }

  /// Write lane `t`'s share into the sub-tile packet at `packet` (a lane with no value present
  /// writes nothing: its group is beyond the message).
  __device__ __forceinline__ static void store(unsigned char* packet, const packed& r, int t, int valid) {
    if (valid <= 0) return;
    const int g = t / LANES, lane = t % LANES;
    echo::detail::store_words<WORDS>(packet + pk::code_offset(g) + lane * WORDS * 4, r.words);
    if (lane == 0) *reinterpret_cast<quant::wire_params*>(packet + pk::param_offset(32 / LANES, g)) = r.w;
  }

  /// Dequantize lane `t`'s share of a packet a peer wrote, times `scale` (a power of two, so the
  /// product is exact: a group transform's 1 / G, folded into the step where the decode is affine).
  __device__ __forceinline__ static void load(const unsigned char* packet, int t, float (&v)[V], float scale = 1.0f) {
    const int g = t / LANES, lane = t % LANES;
    uint32_t words[WORDS];
    echo::detail::load_words<WORDS, cub::LOAD_CG>(packet + pk::code_offset(g) + lane * WORDS * 4, words);
    const uint32_t raw = cub::ThreadLoad<cub::LOAD_CG>(
        reinterpret_cast<uint32_t*>(const_cast<unsigned char*>(packet) + pk::param_offset(32 / LANES, g)));
    const quant::group_params p = Q::unpack({static_cast<uint16_t>(raw & 0xFFFFu), static_cast<uint16_t>(raw >> 16)});
    if constexpr (Q::affine_decode && bits == 4) {
      // (q - z) s with z = bias - code_magic, from f = 0.5 + q / 256: f (256 s) - (128 + z) s. The
      // policy's two roundings are exact ((q - z) s has at most 4 + 11 bits, s being an fp16
      // value), and so are 256 s and (128 + z) s (8 + 11 bits), so one fma rounds the exact
      // (q - z) s as well: the same bits, one operation a value instead of two. (A zero comes out
      // +0 either way; only a scale of 0 with q != z, which no encode makes, would differ.)
      float f[V];
      pk::get_codes_unit(words, f);
      const float step = echo::detail::mul_rn(p.scale, scale);
      const float s256 = echo::detail::mul_rn(step, 256.0f);
      const float c = echo::detail::mul_rn(echo::detail::add_rn(echo::detail::sub_rn(p.bias, echo::detail::code_magic), 128.0f), step);
#pragma unroll
      for (int i = 0; i < V; ++i) v[i] = echo::detail::fma_rn(f[i], s256, -c);
    } else {
      uint32_t c[V];
      pk::get_codes(words, c);
#pragma unroll
      for (int i = 0; i < V; ++i) v[i] = Q::decode(c[i], p);
      if (scale != 1.0f) {
#pragma unroll
        for (int i = 0; i < V; ++i) v[i] = echo::detail::mul_rn(v[i], scale);
      }
    }
  }
};

/// quant::none: the packet holds the values rounded to T.
template <class Q, class T, int LaneValues>
struct tile_codec<Q, T, LaneValues, std::enable_if_t<!Q::quantizes>> {
  static constexpr int V = 32 / sizeof(T);  // 32 bytes a lane: two 16-byte accesses
  __host__ __device__ static constexpr size_t sub_tile_bytes() { return size_t(32) * V * sizeof(T); }

  struct packed {
    float v[V];
  };
  __device__ __forceinline__ static packed quantize(const float (&x)[V], int, float (&dq)[V],
                                                    quant::group_params* = nullptr, bool* fits = nullptr) {
    if (fits) *fits = false;  // no grid: the storage fits a step to its own errors
    packed r;
#pragma unroll
    for (int i = 0; i < V; ++i) r.v[i] = dq[i] = element_traits<T>::to_float(element_traits<T>::from_float(x[i]));
    return r;
  }
  __device__ __forceinline__ static void store(unsigned char* packet, const packed& r, int t, int valid) {
    if (valid > 0) echo::detail::store_floats<T, V>(reinterpret_cast<T*>(packet) + t * V, valid, r.v);
  }
  __device__ __forceinline__ static void load(const unsigned char* packet, int t, float (&v)[V]) {
    echo::detail::load_floats<T, V, cub::LOAD_CG>(reinterpret_cast<const T*>(packet) + t * V, V, v);
  }
};

#endif

}  // namespace echo::collective
