// The segments of the sequence-parallel collectives (reference::reduce_scatter, all_gather):
// P equal segments, contiguous by rank, each a whole number of the quantizer's groups; and a
// segment's decoded values taken back from the quantizer's transformed domain.
#pragma once

#include "../detail/fp_ops.cuh"
#include "../detail/partition.cuh"
#include "../quant/transform.cuh"

#include <cstddef>
#include <vector>

namespace echo::reference {

/// What is wrong with a sequence-parallel message of n values over P ranks under Q (null: nothing).
template <class Q>
const char* segment_error(size_t n, int P) {
  if (P < 1) return "ranks: must be >= 1";
  if (n % static_cast<size_t>(P) != 0) return "n: not P equal segments (n % P != 0)";
  if ((n / static_cast<size_t>(P)) % detail::granule_of<Q>() != 0)
    return "n: a segment (n / P) is not a whole number of the quantizer's groups";
  return nullptr;
}

/// The decoded values of one segment of x' sent as Q's codes, transformed back to the input's
/// domain when Q transforms (each whole group), as floats (not yet rounded to T).
template <class Q, class T>
std::vector<float> back_from_domain(std::vector<float> y) {
  using transform = quant::transform_of_t<Q>;
  if constexpr (transform::active) {
    constexpr size_t G = static_cast<size_t>(Q::group);
    for (size_t k = 0; k + G <= y.size(); k += G) {
      for (size_t i = 0; i < G; ++i) y[k + i] = detail::mul_rn(y[k + i], transform::inv_size);
      transform::inverse_scaled(&y[k]);
    }
  }
  return y;
}

}  // namespace echo::reference
