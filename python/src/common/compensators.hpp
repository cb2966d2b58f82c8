// The compensators the Python package instantiates with every quantizer, and their names.
#pragma once

#include <echo/echo.cuh>

#include <tuple>
#include <type_traits>

namespace echo_py {

template <class... T>
struct type_list {
  static constexpr size_t size = sizeof...(T);
  template <size_t I>
  using at = std::tuple_element_t<I, std::tuple<T...>>;
};

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
template <>
struct comp_names<echo::comp::error_feedback<echo::comp::int8_state>> {
  static constexpr const char* comp = "error_feedback";
  static constexpr const char* storage = "int8";
};

template <>
struct comp_names<echo::comp::error_feedback<echo::comp::step8_state>> {
  static constexpr const char* comp = "error_feedback";
  static constexpr const char* storage = "step8";
};

/// Every quantizer of the tables is instantiated with each of these.
using compensators = type_list<echo::comp::none, echo::comp::error_feedback<echo::comp::step8_state>,
                               echo::comp::error_feedback<echo::comp::int8_state>,
                               echo::comp::error_feedback<echo::bfloat16_t>, echo::comp::error_feedback<float>>;

/// The compensators of the torch table's outlier entries (common/quantizers.hpp): each is a full set
/// of device pipelines, and fp32 state adds nothing there that bf16 does not show.
using compensators_lean = type_list<echo::comp::none, echo::comp::error_feedback<echo::comp::step8_state>,
                                    echo::comp::error_feedback<echo::comp::int8_state>,
                                    echo::comp::error_feedback<echo::bfloat16_t>>;

/// Table keys: quant::none has no bits or group (0, 0); a group transform and a clip (in 1024ths of
/// the range, 1024: none) name the rest.
template <class Q>
constexpr int bits_of() {
  return std::is_same<Q, echo::quant::none>::value ? 0 : Q::bits;
}
template <class Q>
constexpr int group_of() {
  return std::is_same<Q, echo::quant::none>::value ? 0 : Q::group;
}
template <class Q>
constexpr bool rotate_of() {
  return echo::quant::transform_of_t<Q>::active;
}
template <class Q>
constexpr int clip_of() {
  return echo::quant::clip_of<Q>::ratio_1024;
}

}  // namespace echo_py
