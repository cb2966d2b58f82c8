// The host reference's table: one entry per compiled (quantizer, compensator) pair, found by name
// at run time. Quantizers and compensators: common/quantizers.hpp and common/compensators.hpp. One
// translation unit per quantizer family adds its entries, so a parallel build compiles them side by side.
#pragma once

#include "../common/quantizers.hpp"

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace echo_py::ref {

/// A chain of the reference (echo::reference::chain_state), with its storage type erased.
class chain_base {
 public:
  virtual ~chain_base() = default;
  virtual int ranks() const = 0;
  virtual size_t capacity() const = 0;
  virtual size_t size() const = 0;  ///< n of the chain's calls so far (0: fresh)
  virtual void reset() = 0;
  virtual float error(int rank, size_t i) const = 0;
  virtual const char* storage() const = 0;
};

template <class C>
class chain_impl final : public chain_base {
 public:
  chain_impl(int ranks, size_t capacity) : state(ranks, capacity) {}
  int ranks() const override { return state.ranks(); }
  size_t capacity() const override { return state.capacity(); }
  size_t size() const override { return state.size(); }
  void reset() override { state.reset(); }
  float error(int rank, size_t i) const override { return state.error(rank, i); }
  const char* storage() const override { return comp_names<C>::storage; }
  echo::reference::chain_state<C> state;
};

/// closes: the call that closes its chain (echo::reference::all_reduce::close_chain).
using run_fn = void (*)(echo::dtype, const std::vector<const void*>& in, const std::vector<void*>& out, size_t n,
                        chain_base* chain, bool closes);

struct entry {
  const char* quant;
  int bits;   ///< 0 for quant none
  int group;  ///< 0 for quant none
  bool rotate;  ///< quant::rotated
  int clip;     ///< quant::clipped's ratio in 1024ths (1024: none)
  const char* comp;
  const char* storage;  ///< "" for comp none
  run_fn run;
};

template <class Q, class C>
void run(echo::dtype t, const std::vector<const void*>& in, const std::vector<void*>& out, size_t n, chain_base* chain,
         bool closes) {
  const echo::reference::all_reduce<Q, C> ar(static_cast<int>(in.size()));
  const auto call = [&](typename echo::reference::all_reduce<Q, C>::chain* ch) {
    if (closes) ar.close_chain(t, in, out, n, ch);
    else ar(t, in, out, n, ch);
  };
  if constexpr (C::keeps_state) {
    auto* c = dynamic_cast<chain_impl<C>*>(chain);
    if (!c)
      throw std::invalid_argument(std::string("echo_allreduce.reference: error_feedback with storage '") +
                                  comp_names<C>::storage + "' needs a ChainState of that storage" +
                                  (chain ? std::string(", got one of '") + chain->storage() + "'" : std::string()));
    call(&c->state);
  } else {
    if (chain) throw std::invalid_argument("echo_allreduce.reference: comp 'none' keeps no state; pass no chain");
    call(nullptr);
  }
}

/// Q with compensator C, where C keeps Q's errors (comp::holds_errors_of: no clip on a step state).
template <class Q, class C>
void add_one(std::vector<entry>& table) {
  if constexpr (echo::comp::holds_errors_of<C, Q>::value)
    table.push_back({Q::name, bits_of<Q>(), group_of<Q>(), rotate_of<Q>(), clip_of<Q>(), comp_names<C>::comp,
                     comp_names<C>::storage, &run<Q, C>});
}

template <class Q, class... C>
void add(std::vector<entry>& table, type_list<C...>) {
  (add_one<Q, C>(table), ...);
}

/// Adds every quantizer of a family (common/quantizers.hpp) with every compensator.
template <class... Q>
void add_family(std::vector<entry>& table, type_list<Q...>) {
  (add<Q>(table, compensators{}), ...);
}

void add_zero_aware(std::vector<entry>& table);
void add_symmetric(std::vector<entry>& table);
void add_naive_zero_point(std::vector<entry>& table);
void add_none(std::vector<entry>& table);
void add_outlier(std::vector<entry>& table);

}  // namespace echo_py::ref
