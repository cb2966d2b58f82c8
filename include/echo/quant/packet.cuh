// packet<Q>: the wire layout of a run of groups, shared by the host codec and the device kernels.
//
//   [ codes of group 0 | codes of group 1 | ... | pad to 16 B ][ p0 p1 of group 0 | ... | pad to 16 B ]
//
// Codes of a group are g * b bits, a whole number of little-endian 32-bit words; value i of the
// group sits at bits [i*b, (i+1)*b) counted from bit 0 of the group's first word, so a value may
// straddle two words when b is 3 or 6. Parameters are fp16 bit patterns (p0 then p1), 4 bytes a
// group. For b in {4, 8} and any g, and b = 2 with g >= 64, every group's codes start on a
// 16-byte boundary, so a thread can write its share of a group with one 16-byte store. Padding
// codes of a tail group shorter than g are 0 and never decoded.
#pragma once

#include "../detail/ceil_div.cuh"
#include "group_params.cuh"

#include <cstring>

namespace echo::quant {

template <class Q>
struct packet {
  static_assert(Q::quantizes, "echo::quant::packet: the none quantizer has no packet layout");
  static constexpr int bits = Q::bits;
  static constexpr int group = Q::group;
  static constexpr size_t code_bytes = Q::code_bytes;
  static constexpr size_t code_words = code_bytes / 4;

  ECHO_HD static constexpr size_t align16(size_t b) { return (b + 15) & ~size_t(15); }
  ECHO_HD static constexpr size_t groups_for(size_t values) { return echo::detail::ceil_div(values, group); }
  ECHO_HD static constexpr size_t codes_region(size_t groups) { return align16(groups * code_bytes); }
  /// Bytes of a packet holding `groups` groups.
  ECHO_HD static constexpr size_t bytes(size_t groups) { return codes_region(groups) + align16(groups * 4); }
  ECHO_HD static constexpr size_t code_offset(size_t k) { return k * code_bytes; }
  ECHO_HD static constexpr size_t param_offset(size_t groups, size_t k) { return codes_region(groups) + 4 * k; }

  /// Code i (0 <= i < g) of a group's words, biased (detail::biased): on the device one
  /// operation after the shift (a byte permute for 8 bits, an and-or for the others).
  ECHO_HD static uint32_t get_code(const uint32_t* words, int i) {
    const int bit = i * bits, w = bit >> 5, off = bit & 31;
#if ECHO_DEVICE_COMPILE
    if constexpr (bits == 8) {
      return __byte_perm(words[w], echo::detail::code_magic_bits, 0x7650u | static_cast<unsigned>(off >> 3));
    } else if (off + bits <= 32) {
      uint32_t c;
      asm("lop3.b32 %0, %1, %2, %3, 0xEA;"  // (a & b) | c, both constants in one operation
          : "=r"(c)
          : "r"(words[w] >> off), "n"(Q::max_code), "n"(echo::detail::code_magic_bits));
      return c;
    }
#endif
    uint32_t v = words[w] >> off;
    if (off + bits > 32) v |= words[w + 1] << (32 - off);
    return echo::detail::biased(v & Q::max_code);
  }
  /// Or code c (biased or not: only its low b bits count) into a group's words (the words must
  /// start zeroed).
  ECHO_HD static void put_code(uint32_t* words, int i, uint32_t c) {
    const int bit = i * bits, w = bit >> 5, off = bit & 31;
#if ECHO_DEVICE_COMPILE
    if constexpr (bits == 8) {  // one byte permute: c's low byte replaces byte off / 8
      const unsigned k = static_cast<unsigned>(off >> 3);
      words[w] = __byte_perm(words[w], c, (0x3210u & ~(0xFu << (4 * k))) | (4u << (4 * k)));
      return;
    }
#endif
    const uint32_t q = c & Q::max_code;
    words[w] |= q << off;
    if (off + bits > 32) words[w + 1] |= q >> (32 - off);
  }

  /// put_code for codes 0..N-1 (words zeroed). On the device, 4-bit codes go 8 to a word in 7
  /// operations instead of two each (a shift-add pairs two codes in a low byte, and byte
  /// permutes gather four of those), 8-bit codes 4 to a word in 3 byte permutes. The device path needs biased codes in range (code_magic_bits
  /// | q, q <= max_code: what encode returns, and position on the grid), as the codecs give it.
  template <int N>
  ECHO_HD static void put_codes(uint32_t* words, const uint32_t (&c)[N]) {
#if ECHO_DEVICE_COMPILE
    if constexpr (bits == 4 && N % 8 == 0) {
#pragma unroll
      for (int w = 0; w < N / 8; ++w) {
        uint32_t u[4];  // byte 0 of u[k]: codes 2k and 2k + 1 (the carries of the rest stay above it)
#pragma unroll
        for (int k = 0; k < 4; ++k) u[k] = (c[8 * w + 2 * k + 1] << 4) + c[8 * w + 2 * k];
        words[w] = __byte_perm(__byte_perm(u[0], u[1], 0x0040u), __byte_perm(u[2], u[3], 0x0040u), 0x5410u);
      }
    } else if constexpr (bits == 8 && N % 4 == 0) {  // 3 byte permutes a word instead of 4
#pragma unroll
      for (int w = 0; w < N / 4; ++w)
        words[w] = __byte_perm(__byte_perm(c[4 * w], c[4 * w + 1], 0x0040u), __byte_perm(c[4 * w + 2], c[4 * w + 3], 0x0040u),
                               0x5410u);
    } else
#endif
    {
#if ECHO_DEVICE_COMPILE
#pragma unroll
#endif
      for (int i = 0; i < N; ++i) put_code(words, i, c[i]);
    }
  }

  /// get_code for codes 0..N-1. On the device, 4-bit codes come out of a word in 11 operations
  /// instead of 15: two masks split even and odd codes into bytes, and a byte permute a code puts
  /// one under the bias (as 8-bit codes do).
  template <int N>
  ECHO_HD static void get_codes(const uint32_t* words, uint32_t (&c)[N]) {
#if ECHO_DEVICE_COMPILE
    if constexpr (bits == 4 && N % 8 == 0) {
#pragma unroll
      for (int w = 0; w < N / 8; ++w) {
        const uint32_t even = words[w] & 0x0F0F0F0Fu, odd = (words[w] >> 4) & 0x0F0F0F0Fu;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          c[8 * w + 2 * k] = __byte_perm(even, echo::detail::code_magic_bits, 0x7650u | k);
          c[8 * w + 2 * k + 1] = __byte_perm(odd, echo::detail::code_magic_bits, 0x7650u | k);
        }
      }
    } else
#endif
    {
#if ECHO_DEVICE_COMPILE
#pragma unroll
#endif
      for (int i = 0; i < N; ++i) c[i] = get_code(words, i);
    }
  }

#if ECHO_HAS_CUDA
  /// Codes 0..N-1 of 4-bit words as the floats 0.5 + q / 256 (device only): the byte permute that
  /// unpacks a code puts it under a smaller exponent than the bias's, so that an affine decode
  /// ends in one fma (tile_codec::load).
  template <int N>
  __device__ static void get_codes_unit(const uint32_t* words, float (&f)[N]) {
    static_assert(bits == 4 && N % 8 == 0, "echo::quant::packet::get_codes_unit: 4-bit codes, 8 to a word");
#pragma unroll
    for (int w = 0; w < N / 8; ++w) {
      const uint32_t even = words[w] & 0x0F0F0F0Fu, odd = (words[w] >> 4) & 0x0F0F0F0Fu;
#pragma unroll
      for (int k = 0; k < 4; ++k) {  // bytes 0, 0, code, 0x3F: 2^-1 (1 + q 2^-7)
        f[8 * w + 2 * k] = __uint_as_float(__byte_perm(even, 0x3F000000u, 0x7044u | (k << 8)));
        f[8 * w + 2 * k + 1] = __uint_as_float(__byte_perm(odd, 0x3F000000u, 0x7044u | (k << 8)));
      }
    }
  }
#endif

  /// Host codec: quantize `count` values into a packet of groups_for(count) groups.
  static void encode(const float* x, size_t count, void* out) {
    const size_t groups = groups_for(count);
    auto* base = static_cast<unsigned char*>(out);
    for (size_t k = 0; k < groups; ++k) {
      const size_t first = k * group, len = count - first < size_t(group) ? count - first : size_t(group);
      group_stats st = group_stats::empty();
      for (size_t i = 0; i < len; ++i) st.add(x[first + i]);
      const wire_params w = Q::fit(st);
      const group_params p = Q::unpack(w);
      uint32_t words[code_words] = {};
      for (size_t i = 0; i < len; ++i) put_code(words, static_cast<int>(i), Q::encode(x[first + i], p));
      std::memcpy(base + code_offset(k), words, code_bytes);
      std::memcpy(base + param_offset(groups, k), &w, 4);
    }
    const size_t pad = codes_region(groups) - groups * code_bytes;  // keep padding deterministic
    std::memset(base + groups * code_bytes, 0, pad);
    std::memset(base + codes_region(groups) + groups * 4, 0, bytes(groups) - codes_region(groups) - groups * 4);
  }

  /// Host codec: dequantize `count` values from a packet of groups_for(count) groups.
  static void decode(const void* in, size_t count, float* x) {
    const size_t groups = groups_for(count);
    const auto* base = static_cast<const unsigned char*>(in);
    for (size_t k = 0; k < groups; ++k) {
      const size_t first = k * group, len = count - first < size_t(group) ? count - first : size_t(group);
      wire_params w;
      std::memcpy(&w, base + param_offset(groups, k), 4);
      const group_params p = Q::unpack(w);
      uint32_t words[code_words];
      std::memcpy(words, base + code_offset(k), code_bytes);
      for (size_t i = 0; i < len; ++i) x[first + i] = Q::decode(get_code(words, static_cast<int>(i)), p);
    }
  }
};

}  // namespace echo::quant
