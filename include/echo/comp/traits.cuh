// The compensator contract (compensator.cuh) as a trait, so that a policy which breaks it fails at
// compile time with a sentence (echo::all_reduce and echo::reference::all_reduce assert it).
#pragma once

#include "error_feedback.cuh"
#include "state_storage.cuh"

#include <cstddef>
#include <type_traits>

namespace echo::comp {

namespace detail {
template <class C, class = void>
struct has_identity : std::false_type {};
template <class C>
struct has_identity<C, std::void_t<decltype(C::name), decltype(C::keeps_state), decltype(C::state_bytes(size_t{}))>>
    : std::bool_constant<std::is_convertible<decltype(C::name), const char*>::value &&
                         std::is_same<std::decay_t<decltype(C::keeps_state)>, bool>::value &&
                         std::is_convertible<decltype(C::state_bytes(size_t{})), size_t>::value> {};

template <class C, class = void>
struct has_state_ops : std::false_type {};
template <class C>
struct has_state_ops<C, std::void_t<typename C::storage, decltype(C::keep(0.0f)),
                                    decltype(state_storage<typename C::storage>::bytes(size_t{}))>>
    : std::is_same<decltype(C::keep(0.0f)), float> {};
}  // namespace detail

/// Whether C is a compensator: name, keeps_state and state_bytes(n); one that keeps state also
/// names its storage (a state_storage) and keep(e) -> float.
template <class C, class = void>
struct is_compensator : std::false_type {};
template <class C>
struct is_compensator<C, std::enable_if_t<detail::has_identity<C>::value>>
    : std::bool_constant<C::keeps_state ? detail::has_state_ops<C>::value : true> {};

/// Instantiated by echo::all_reduce and echo::reference::all_reduce: is_compensator<C>, and that C
/// can hold Q's errors (holds_errors_of), each asserted once with its sentence.
template <class C, class Q>
struct check_compensator {
  static_assert(is_compensator<C>::value,
                "echo: Comp is not a compensator: it needs name, keeps_state and state_bytes(n), and, when it keeps "
                "state, a storage and keep(e) (comp/compensator.cuh)");
  static_assert(holds_errors_of<C, Q>::value,
                "echo: a clipped quantizer's errors exceed what step8_state / step4_state hold (+-0.99 / +-0.875 data "
                "steps); keep them as comp::int8_state, int4_state or an element type");
  static constexpr bool value = true;
};

}  // namespace echo::comp
