// The compensators the Python package instantiates with every quantizer, and their names.
//
// Also the seam to the echo API of the day: python/CMakeLists.txt defines ECHO_PY_HAS_INT8_STATE
// and ECHO_PY_HAS_CHAIN_VIEW from what include/echo provides, so this package builds against
// main before and after the chain_view / int8_state change (drop the old branches once landed).
#pragma once

#include <echo/echo.cuh>

#include <type_traits>

namespace echo_py {

template <class... T>
struct type_list {};

template <class C>
struct comp_names;
template <>
struct comp_names<echo::comp::none> {
  static constexpr const char* comp = "none";
  static constexpr const char* storage = "";
};
template <>
struct comp_names<echo::comp::error_feedback<float>> {
  static constexpr const char* comp = "error_feedback";
  static constexpr const char* storage = "float";
};
template <>
struct comp_names<echo::comp::error_feedback<echo::bfloat16_t>> {
  static constexpr const char* comp = "error_feedback";
  static constexpr const char* storage = "bf16";
};
#if ECHO_PY_HAS_INT8_STATE
template <>
struct comp_names<echo::comp::error_feedback<echo::comp::int8_state>> {
  static constexpr const char* comp = "error_feedback";
  static constexpr const char* storage = "int8";
};
#endif

/// Every quantizer of the tables is instantiated with each of these.
using compensators = type_list<echo::comp::none,
#if ECHO_PY_HAS_INT8_STATE
                               echo::comp::error_feedback<echo::comp::int8_state>,
#endif
                               echo::comp::error_feedback<echo::bfloat16_t>, echo::comp::error_feedback<float>>;

namespace detail {
template <class C>
constexpr auto keeps_state(int) -> decltype(C::keeps_state, bool()) {
  return C::keeps_state;
}
template <class C>
constexpr bool keeps_state(long) {
  return C::enabled;  // the name before the API change
}
}  // namespace detail

/// Whether compensator C keeps error state (a chain).
template <class C>
constexpr bool keeps_state = detail::keeps_state<C>(0);

/// Table keys: quant::none has no bits or group (0, 0).
template <class Q>
constexpr int bits_of() {
  return std::is_same<Q, echo::quant::none>::value ? 0 : Q::bits;
}
template <class Q>
constexpr int group_of() {
  return std::is_same<Q, echo::quant::none>::value ? 0 : Q::group;
}

}  // namespace echo_py
