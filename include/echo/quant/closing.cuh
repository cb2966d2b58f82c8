// closing_of<Q>: the quantizer of a call that closes its chain (echo::all_reduce::close_chain): Q's own
// `closing` where it names one (the group quantizers: the same family and group at 8 bits, the
// same transform, no clip), else Q itself (quant::none: its calls are exact already).
#pragma once

#include "../config.cuh"

#include <type_traits>

namespace echo::quant {

template <class Q, class = void>
struct closing_of {
  using type = Q;
};
template <class Q>
struct closing_of<Q, std::void_t<typename Q::closing>> {
  using type = typename Q::closing;
};
template <class Q>
using closing_of_t = typename closing_of<Q>::type;

}  // namespace echo::quant
