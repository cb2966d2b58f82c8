// The quantizer contract as traits, so that a policy which breaks it fails at compile time with a
// sentence (echo::all_reduce and echo::reference::all_reduce assert them) rather than deep inside a
// kernel. The contract itself: group_params.cuh (group quantizers) and none.cuh.
#pragma once

#include "group_params.cuh"

#include <cstdint>
#include <type_traits>

namespace echo::quant {

namespace detail {
template <class Q, class = void>
struct has_identity : std::false_type {};
template <class Q>
struct has_identity<Q, std::void_t<decltype(Q::name), decltype(Q::quantizes), decltype(Q::bits), decltype(Q::group),
                                   decltype(Q::holds_zero)>>
    : std::bool_constant<std::is_convertible<decltype(Q::name), const char*>::value &&
                         std::is_same<std::decay_t<decltype(Q::quantizes)>, bool>::value &&
                         std::is_same<std::decay_t<decltype(Q::holds_zero)>, bool>::value &&
                         std::is_convertible<decltype(Q::bits), int>::value &&
                         std::is_convertible<decltype(Q::group), int>::value> {};

template <class Q, class = void>
struct has_group_ops : std::false_type {};
template <class Q>
struct has_group_ops<Q, std::void_t<decltype(Q::fit(std::declval<group_stats>())),
                                    decltype(Q::unpack(std::declval<wire_params>())),
                                    decltype(Q::position(0.0f, std::declval<const group_params&>())),
                                    decltype(Q::encode(0.0f, std::declval<const group_params&>())),
                                    decltype(Q::decode(uint32_t{}, std::declval<const group_params&>())),
                                    decltype(Q::max_code), decltype(Q::affine_decode), decltype(Q::code_bytes),
                                    decltype(Q::param_bytes)>>
    : std::bool_constant<std::is_same<decltype(Q::fit(std::declval<group_stats>())), wire_params>::value &&
                         std::is_same<decltype(Q::unpack(std::declval<wire_params>())), group_params>::value &&
                         std::is_same<decltype(Q::position(0.0f, std::declval<const group_params&>())), float>::value &&
                         std::is_same<decltype(Q::encode(0.0f, std::declval<const group_params&>())), uint32_t>::value &&
                         std::is_same<decltype(Q::decode(uint32_t{}, std::declval<const group_params&>())), float>::value> {};
}  // namespace detail

/// Whether Q is a group quantizer: name, bits and group of a supported pair, quantizes, holds_zero,
/// max_code, affine_decode, code_bytes, param_bytes (static constants: group_contract has them),
/// and fit / unpack / position / encode / decode with the contract's types.
template <class Q, class = void>
struct is_group_quantizer : std::false_type {};
template <class Q>
struct is_group_quantizer<Q, std::enable_if_t<detail::has_identity<Q>::value>>
    : std::bool_constant<Q::quantizes && detail::supported_bits(Q::bits) && detail::supported_group(Q::group) &&
                         detail::has_group_ops<Q>::value> {};

/// Whether Q can be an all-reduce's quantizer: a group quantizer, or one that sends values as they
/// are (quantizes false, like quant::none).
template <class Q, class = void>
struct is_quantizer : std::false_type {};
template <class Q>
struct is_quantizer<Q, std::enable_if_t<detail::has_identity<Q>::value>>
    : std::bool_constant<Q::quantizes ? is_group_quantizer<Q>::value : true> {};

/// Instantiated by echo::all_reduce and echo::reference::all_reduce: is_quantizer<Q>, asserted once
/// with the contract's sentence.
template <class Q>
struct check_quantizer {
  static_assert(is_quantizer<Q>::value,
                "echo: Quant is not a quantizer: it needs name, quantizes, bits, group and holds_zero, and, when it "
                "quantizes, a supported (bits, group) and fit / unpack / position / encode / decode (quant/group_params.cuh)");
  static constexpr bool value = true;
};

}  // namespace echo::quant
