// tile_codec<Q, T>: how one thread of a block quantizes, packs, unpacks and dequantizes its
// V consecutive values of a tile. A tile is THREADS * V values; its packet is quant::packet<Q>
// of THREADS / LANES groups (raw T values for the passthrough quantizer).
#pragma once

#include "../detail/vector_io.cuh"
#include "../quant/packet.cuh"

#include <type_traits>

namespace echo::collective {

#if ECHO_HAS_CUDA

template <class Q, class T, class = void>
struct tile_codec;

/// Group quantizers: V values per thread whose codes are whole 32-bit words (16 bytes for
/// b = 4 and 8), LANES = g / V consecutive lanes of a warp share a group.
template <class Q, class T>
struct tile_codec<Q, T, std::enable_if_t<!Q::passthrough>> {
  static constexpr int bits = Q::bits;
  static constexpr int unit = 32 / (bits & -bits);  // fewest values whose codes fill whole words
  static constexpr int wide = (64 / bits) / unit * unit;  // 8 bytes of codes a lane
  static constexpr int V = unit > (wide < Q::group ? wide : Q::group) ? unit : (wide < Q::group ? wide : Q::group);
  static constexpr int LANES = Q::group / V;
  static constexpr int WORDS = V * bits / 32;
  static_assert(V * bits % 32 == 0 && Q::group % V == 0 && LANES <= 32 && (LANES & (LANES - 1)) == 0,
                "echo::collective::tile_codec: thread layout");
  using pk = quant::packet<Q>;

  __host__ __device__ static constexpr size_t tile_bytes(int threads) { return pk::bytes(threads / LANES); }

  /// Quantize v (valid <= V present values) into the packets at bases[d] + offset for every
  /// d < nbases other than `skip` (nbases 0: compute only); dq receives D(Q(v)).
  /// Every thread of the block must call it (the group reduction uses warp shuffles).
  __device__ __forceinline__ static void encode(const float (&v)[V], int valid, unsigned char* const* bases,
                                                int nbases, int skip, size_t offset, int threads, int t,
                                                float (&dq)[V]) {
    quant::group_stats st = quant::group_stats::empty();
#pragma unroll
    for (int i = 0; i < V; ++i)
      if (i < valid) st.add(v[i]);
#pragma unroll
    for (int off = 1; off < LANES; off <<= 1) {
      st.lo = fminf(st.lo, __shfl_xor_sync(0xffffffffu, st.lo, off));
      st.hi = fmaxf(st.hi, __shfl_xor_sync(0xffffffffu, st.hi, off));
      st.finite = __shfl_xor_sync(0xffffffffu, static_cast<int>(st.finite), off) != 0 && st.finite;
    }
    const quant::wire_params w = Q::fit(st);
    const quant::group_params p = Q::unpack(w);
    uint32_t words[WORDS] = {};
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const uint32_t q = i < valid ? Q::encode(v[i], p) : 0u;
      pk::put_code(words, i, q);
      dq[i] = Q::decode(q, p);
    }
    if (valid > 0) {
      const int g = t / LANES, lane = t % LANES;
      for (int d = 0; d < nbases; ++d) {
        if (d == skip) continue;
        unsigned char* packet = bases[d] + offset;
        detail::store_words<WORDS>(packet + pk::code_offset(g) + lane * WORDS * 4, words);
        if (lane == 0) *reinterpret_cast<quant::wire_params*>(packet + pk::param_offset(threads / LANES, g)) = w;
      }
    }
  }

  /// Dequantize this thread's values of a packet a peer wrote.
  __device__ __forceinline__ static void decode(const unsigned char* packet, int threads, int t, float (&v)[V]) {
    const int g = t / LANES, lane = t % LANES;
    uint32_t words[WORDS];
    detail::load_words_cg<WORDS>(packet + pk::code_offset(g) + lane * WORDS * 4, words);
    const uint32_t raw = __ldcg(reinterpret_cast<const unsigned int*>(packet + pk::param_offset(threads / LANES, g)));
    const quant::group_params p = Q::unpack({static_cast<uint16_t>(raw & 0xFFFFu), static_cast<uint16_t>(raw >> 16)});
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] = Q::decode(pk::get_code(words, i), p);
  }
};

/// Passthrough: the packet holds the values rounded to T.
template <class Q, class T>
struct tile_codec<Q, T, std::enable_if_t<Q::passthrough>> {
  static constexpr int V = 32 / sizeof(T);  // 32 bytes a lane: two 16-byte loads
  __host__ __device__ static constexpr size_t tile_bytes(int threads) {
    return static_cast<size_t>(threads) * V * sizeof(T);
  }
  __device__ __forceinline__ static void encode(const float (&v)[V], int valid, unsigned char* const* bases,
                                                int nbases, int skip, size_t offset, int, int t, float (&dq)[V]) {
#pragma unroll
    for (int i = 0; i < V; ++i) dq[i] = element_traits<T>::to_float(element_traits<T>::from_float(v[i]));
    if (valid > 0)
      for (int d = 0; d < nbases; ++d)
        if (d != skip) detail::store_floats<T, V>(reinterpret_cast<T*>(bases[d] + offset) + t * V, valid, dq);
  }
  __device__ __forceinline__ static void decode(const unsigned char* packet, int, int t, float (&v)[V]) {
    detail::load_floats_cg<T, V>(reinterpret_cast<const T*>(packet) + t * V, V, v);
  }
};

#endif

}  // namespace echo::collective
