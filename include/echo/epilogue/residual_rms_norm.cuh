// echo::epilogue::residual_rms_norm: what a call does after its all-reduce where a tensor-parallel
// block ends the way inference engines end it (vLLM's fused_add_rms_norm, FlashInfer's and
// TensorRT-LLM's all-reduce fusion): add the block's output into the residual stream and
// normalise it for the next layer, in the same launch as the all-reduce.
//
// With a = the all-reduce of the call, rounded to T (the plain call's bits), per row of `hidden`
// values:
//   residual <- T(residual + a)                                   (one fp32 add, one rounding)
//   out      <- T( float(T(residual * inv)) * weight )            (the order of Llama's RMSNorm)
//   inv       = 1 / sqrt(sum(residual^2) / hidden + epsilon)      (fp32, each step rounded once)
// The sum of squares runs in the fixed order of sum_order below, so every rank, the host
// reference and every kernel give the same bits. The plain call is epilogue::none.
#pragma once

#include "../config.cuh"
#include "../detail/fp_ops.cuh"
#include "../dtype.cuh"

#include <cmath>
#include <cstddef>
#include <cstdint>

namespace echo::epilogue {

/// The plain call: out = the all-reduce.
struct none {};

/// The fused residual add + RMSNorm. out (the call's) receives the normalised rows; residual is
/// updated in place. T: the call's element type (void in the runtime-dtype forms).
template <class T>
struct residual_rms_norm {
  T* residual = nullptr;      ///< [n / hidden, hidden], updated in place
  const T* weight = nullptr;  ///< [hidden]
  size_t hidden = 0;          ///< values a row: a multiple of 8, at most max_hidden
  float epsilon = 1e-6f;      ///< finite, >= 0
};

/// The largest row.
inline constexpr size_t max_hidden = 16384;

/// The order of a row's sum of squares: chunk c (values [8c, 8c + 8)) belongs to lane c % 32 of
/// slice (c / 32) % 8. A lane's partial of a slice sums the squares of its chunks in increasing c,
/// each chunk's values in order, as fused multiply-adds from +0. A slice's 32 partials combine by
/// the butterfly p_j + p_(j xor m), m = 16, 8, 4, 2, 1 (lane 0's result), and the 8 slices as
/// ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)). So a row can be taken by one warp or by up
/// to 8 warps of a block, with the same bits.
struct sum_order {
  static constexpr int chunk = 8;
  static constexpr int lanes = 32;
  static constexpr int slices = 8;
  static constexpr size_t span = static_cast<size_t>(chunk) * lanes * slices;  ///< values a round of all slices covers
};

/// What a kernel takes: the epilogue as plain data (kind says whether there is one).
enum class kind : uint8_t { none, residual_rms_norm };

template <class E>
struct job {
  kind what = kind::none;
  E* residual = nullptr;
  const E* weight = nullptr;
  uint32_t hidden = 0;
  float epsilon = 0.0f;

  ECHO_HD bool active() const { return what != kind::none; }
};

/// 1 / sqrt(sum / hidden + epsilon), each step rounded once (host and device alike).
ECHO_HD float inverse_rms(float sum_sq, uint32_t hidden, float epsilon) {
  const float mean = detail::div_rn(sum_sq, static_cast<float>(hidden));
  return detail::div_rn(1.0f, detail::sqrt_rn(detail::add_rn(mean, epsilon)));
}

/// One normalised value before its final rounding: float(T(r * inv)) * w.
template <class E>
ECHO_HD float normalised(float r, float inv, float w) {
  const float h = element_traits<E>::to_float(element_traits<E>::from_float(detail::mul_rn(r, inv)));
  return detail::mul_rn(h, w);
}

/// What is wrong with an epilogue for a call of n values (null: nothing).
template <class T>
const char* argument_error(const residual_rms_norm<T>& e, size_t n) {
  if (e.hidden == 0 || e.hidden % sum_order::chunk != 0) return "epilogue.hidden: must be a positive multiple of 8";
  if (e.hidden > max_hidden) return "epilogue.hidden: above 16384";
  if (n % e.hidden != 0) return "epilogue.hidden: n is not a whole number of rows";
  if (!(std::isfinite(e.epsilon) && e.epsilon >= 0.0f)) return "epilogue.epsilon: must be finite and >= 0";
  return nullptr;
}

}  // namespace echo::epilogue
