// The few names the reshaping of Echo's API changes, read here under either spelling so the
// benchmarks build before and after it lands on main. Delete the old spellings (and then this
// file) once main has the new API.
//   Comp::enabled               -> Comp::keeps_state
//   Quant::passthrough          -> !Quant::quantizes
//   passthrough_below_bytes     -> unquantized_below_bytes (option and accessor)
//   communicator::destroy(...)  -> gone where communicators own their NCCL communicators
#pragma once

#include <echo/communicator.cuh>

#include <type_traits>
#include <utility>
#include <vector>

namespace echo_bench::compat {

template <class C, class = void>
struct keeps_state : std::bool_constant<C::enabled> {};
template <class C>
struct keeps_state<C, std::void_t<decltype(C::keeps_state)>> : std::bool_constant<C::keeps_state> {};
/// Does compensator C keep error-feedback state (a chain)?
template <class C>
constexpr bool keeps_state_v = keeps_state<C>::value;

template <class Q, class = void>
struct quantizes : std::bool_constant<!Q::passthrough> {};
template <class Q>
struct quantizes<Q, std::void_t<decltype(Q::quantizes)>> : std::bool_constant<Q::quantizes> {};
/// Does quantizer Q quantize (quant::none does not)?
template <class Q>
constexpr bool quantizes_v = quantizes<Q>::value;

/// Calls of fewer bytes take the unquantized path; 0 forces the quantizer at every size.
template <class Options>
auto set_unquantized_below(Options& o, long long bytes, int) -> decltype(o.unquantized_below_bytes = bytes, void()) {
  o.unquantized_below_bytes = bytes;
}
template <class Options>
auto set_unquantized_below(Options& o, long long bytes, long) -> decltype(o.passthrough_below_bytes = bytes, void()) {
  o.passthrough_below_bytes = bytes;
}
template <class Options>
void set_unquantized_below(Options& o, long long bytes) {
  set_unquantized_below(o, bytes, 0);
}

template <class AR>
auto unquantized_below(const AR& ar, int) -> decltype(static_cast<size_t>(ar.unquantized_below_bytes())) {
  return static_cast<size_t>(ar.unquantized_below_bytes());
}
template <class AR>
auto unquantized_below(const AR& ar, long) -> decltype(static_cast<size_t>(ar.passthrough_below_bytes())) {
  return static_cast<size_t>(ar.passthrough_below_bytes());
}
/// The size below which ar's calls take the unquantized path.
template <class AR>
size_t unquantized_below(const AR& ar) {
  return unquantized_below(ar, 0);
}

template <class Comm>
auto destroy(std::vector<Comm>& comms, int) -> decltype(Comm::destroy(comms), void()) {
  Comm::destroy(comms);
}
template <class Comm>
void destroy(std::vector<Comm>&, long) {}
/// Release the NCCL communicators communicator::local made, where the API asks for it.
inline void destroy(std::vector<echo::communicator>& comms) { destroy(comms, 0); }

}  // namespace echo_bench::compat
