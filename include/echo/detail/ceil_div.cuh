// Ceiling division: one name for it in device, host and host-reference code.
#pragma once

#include "../config.cuh"

namespace echo::detail {

/// ceil(a / b) for a >= 0 and b > 0, in the type of the plain expression (a + b - 1) / b (so a
/// call site's arithmetic is what it was when written out). Not cuda::ceil_div (libcu++): the
/// host reference and the headers it includes build without the CUDA toolkit.
template <class A, class B>
ECHO_HD constexpr auto ceil_div(A a, B b) {
  return (a + b - 1) / b;
}

}  // namespace echo::detail
