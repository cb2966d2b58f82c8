// What a quantizer does to a whole group before it codes it: nothing (identity_transform), or an
// orthogonal transform whose domain the codes, the owner's sum and the chain's errors live in
// (quant::rotated). The pipeline and echo::reference read it through transform_of.
#pragma once

#include "../config.cuh"

#include <type_traits>

namespace echo::quant {

/// The transform of a quantizer without one.
struct identity_transform {
  static constexpr bool active = false;
  /// comp::state_header's domain of the errors a call keeps (0: the input's own).
  static constexpr unsigned domain = 0;
};

/// Q::transform where Q names one, else identity_transform.
template <class Q, class = void>
struct transform_of {
  using type = identity_transform;
};
template <class Q>
struct transform_of<Q, std::void_t<typename Q::transform>> {
  using type = typename Q::transform;
};
template <class Q>
using transform_of_t = typename transform_of<Q>::type;

template <class Q>
constexpr unsigned transform_domain() {
  return transform_of_t<Q>::domain;
}

}  // namespace echo::quant
