// The Python package's view of echo/registry.cuh: the (quantizer, compensator) pairs a table
// compiles, the names they are found by at run time, and the message when none matches. The host
// reference's table and the torch ops' table are both built this way.
#pragma once

#include <echo/registry.cuh>

#include <sstream>
#include <stdexcept>
#include <string>

namespace echo_py {

/// The run-time name of a table entry.
struct key {
  echo::quantizer_key quant;
  const char* comp;
  const char* storage;  ///< "" for a compensator that keeps no state
  unsigned order;       ///< the pair's place in the registry, so a sharded table lists in registry order
};

namespace detail {
static_assert(echo::registered_compensators::size < 64, "echo_py::key::order packs a compensator's place in 6 bits");

template <unsigned Tools, class EQ, class F>
void pairs_of(F& f, std::size_t qi) {
  using Q = typename EQ::type;
  echo::for_each_registered<Tools, echo::registered_compensators>([&](auto c, std::size_t ci) {
    using C = typename decltype(c)::type;
    if constexpr (echo::comp::holds_errors_of<C, Q>::value)
      f(EQ{}, c, key{echo::key_of<Q>(), C::name, echo::storage_name<C>(), static_cast<unsigned>(qi * 64 + ci)});
  });
}
}  // namespace detail

/// f(q, c, key) (q::type: Q, c::type: C) for every quantizer Q of shard Shard of Shards marked
/// Tools, with every compensator C marked Tools that holds Q's errors (comp::holds_errors_of).
template <unsigned Tools, std::size_t Shard, std::size_t Shards, class F>
void for_each_pair(F&& f) {
  echo::for_each_registered<Tools, echo::registered_quantizers, Shard, Shards>(
      [&](auto q, std::size_t qi) { detail::pairs_of<Tools, decltype(q)>(f, qi); });
}

/// Whether the names a caller passed select this entry: quant 'none' ignores bits, group, rotate
/// and clip; comp 'none' ignores storage.
inline bool matches(const key& k, const std::string& quant, int bits, int group, bool rotate, int clip,
                    const std::string& comp, const std::string& storage) {
  const bool none_q = quant == "none", none_c = comp == "none";
  return quant == k.quant.name &&
         (none_q || (bits == k.quant.bits && group == k.quant.group && rotate == k.quant.rotate && clip == k.quant.clip)) &&
         comp == k.comp && (none_c || storage == k.storage);
}

/// The error when no entry matches: `who` names the caller, `more` says where the list is.
inline std::invalid_argument no_entry(const char* who, const std::string& quant, int bits, int group, bool rotate,
                                      int clip, const std::string& comp, const std::string& storage,
                                      const std::string& more) {
  std::ostringstream msg;
  msg << who << ": no compiled instantiation quant='" << quant << "'";
  if (quant != "none") msg << " bits=" << bits << " group_size=" << group << " rotate=" << rotate << " clip=" << clip << "/1024";
  msg << " comp='" << comp << "'";
  if (comp != "none") msg << " storage='" << storage << "'";
  msg << more;
  return std::invalid_argument(msg.str());
}

}  // namespace echo_py
