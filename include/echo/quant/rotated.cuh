// rotated<Q>: quantizer Q applied to each group after a fixed orthogonal transform of the group
// (hadamard<G>), so that one large value no longer sets the step of the other G - 1: the transform
// spreads it over the whole group. The owner sums in the transformed domain, the chain keeps its
// errors there, and the output is transformed back once.
#pragma once

#include "../config.cuh"
#include "../detail/fp_ops.cuh"
#include "transform.cuh"

#include <type_traits>

namespace echo::quant {

/// The unnormalised Walsh-Hadamard transform of G values with a fixed sign vector:
///   forward  y = H (s * x)           (s_i = +-1, H_ij = (-1)^popcount(i & j))
///   inverse  x = s * (H (y / G))      (H H = G I; 1 / G is a power of two, so y / G is exact)
/// H is applied as log2(G) butterfly stages in a fixed order, stage b pairing the values whose
/// indices differ in bit b only (b = 0, 1, ...): (a, c) -> (a + c, a - c), a the one with bit b
/// clear. Every stage rounds in fp32, so forward then inverse is the identity only up to rounding;
/// but host and device do the same operations in the same order and give the same bits, whatever
/// lanes a device splits the group over (a stage's pairs are independent).
///
/// The sign vector keeps a group's mean from landing on one coefficient (H of a constant is a
/// spike): s_i = (-1)^f(i), f a quadratic form on the index bits that pairs bits 0-3 among
/// themselves ((0, 2), (1, 3)) and the bits above among themselves (bit 4 + j with bit 4 + j + m/2
/// for j < m/2, m = log2(G) - 4): bent on the low four bits, so H s is flat there, and as flat as a
/// quadratic form allows above. A constant group then spreads over G / 2 coefficients of
/// magnitude sqrt(2 G) (G = 128) instead of one of G.
template <int G>
struct hadamard {
  static_assert(G == 32 || G == 64 || G == 128 || G == 256, "echo::quant::hadamard: G must be 32, 64, 128 or 256");
  static constexpr bool active = true;
  static constexpr int size = G;
  static constexpr int log2 = G == 32 ? 5 : G == 64 ? 6 : G == 128 ? 7 : 8;
  static constexpr unsigned domain = static_cast<unsigned>(log2 - 4);  ///< comp::state_header's 3-bit domain
  static constexpr const char* name = "hadamard";
  static constexpr float inv_size = 1.0f / static_cast<float>(G);

  /// Whether s_i is -1: negative_low(i mod 16) xor negative_high(i / 16), so that a device lane
  /// holding 16 or 32 consecutive values knows the low part at compile time.
  ECHO_HD static constexpr bool negative_low(int i) {
    const int lo = (i & (i >> 2)) & 3;  // the products i0 i2 and i1 i3
    return lo == 1 || lo == 2;
  }
  ECHO_HD static constexpr bool negative_high(int h) {
    constexpr int half = (log2 - 4) / 2;
    bool f = false;
    for (int j = 0; j < half; ++j) f ^= ((h >> j) & (h >> (j + half)) & 1) != 0;
    return f;
  }
  ECHO_HD static constexpr bool negative(int i) { return negative_low(i & 15) != negative_high(i >> 4); }
  ECHO_HD static float sign(float v, int i) { return negative(i) ? -v : v; }

  /// Host (and device, for a whole group in one thread): the butterflies of H over x[0..G).
  ECHO_HD static void butterflies(float* x) {
    for (int h = 1; h < G; h <<= 1)
      for (int i = 0; i < G; i += 2 * h)
        for (int k = i; k < i + h; ++k) {
          const float a = x[k], c = x[k + h];
          x[k] = echo::detail::add_rn(a, c);
          x[k + h] = echo::detail::sub_rn(a, c);
        }
  }
  ECHO_HD static void forward(float* x) {
    for (int i = 0; i < G; ++i) x[i] = sign(x[i], i);
    butterflies(x);
  }
  /// The inverse of y, already divided by G (decode folds the 1 / G into its step).
  ECHO_HD static void inverse_scaled(float* y) {
    butterflies(y);
    for (int i = 0; i < G; ++i) y[i] = sign(y[i], i);
  }
};

/// Q with every whole group transformed by hadamard<Q::group> before it is coded; a group shorter
/// than Q::group (the message's last, when n is not a multiple of it) is coded as Q codes it.
/// The numeric contract changes from a value's to a group's: every transformed value errs by at
/// most half a step of its (transformed) group, so the group's error has a norm of at most
/// sqrt(G) / 2 steps in the transformed domain, sqrt(1 / G) of that per value back in the input's
/// (H / sqrt(G) is orthogonal); one value's own error is no longer bounded by half a step, and a
/// lone zero no longer decodes to exactly zero (an all-zero group still does: H 0 = 0).
template <class Q>
struct rotated : Q {
  static_assert(Q::quantizes, "echo::quant::rotated: Q must be a group quantizer");
  static_assert(!transform_of_t<Q>::active, "echo::quant::rotated: Q already transforms its groups");
  using transform = hadamard<Q::group>;
  using closing = rotated<typename Q::closing>;  ///< quant::closing_of: the same transform at 8 bits
};

}  // namespace echo::quant
