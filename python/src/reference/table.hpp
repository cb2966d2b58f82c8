// The host reference's table: one entry per (quantizer, compensator) pair of echo/registry.cuh
// marked echo::tool::reference, found by name at run time. The pairs are split over generated
// translation units (python/CMakeLists.txt), so a parallel build compiles them side by side.
#pragma once

#include "../common/registry.hpp"

#include <echo/echo.cuh>

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
  const char* storage() const override { return echo::storage_name<C>(); }
  echo::reference::chain_state<C> state;
};

/// closes: the call that closes its chain (echo::reference::all_reduce::close_chain).
using run_fn = void (*)(echo::dtype, const std::vector<const void*>& in, const std::vector<void*>& out, size_t n,
                        chain_base* chain, bool closes);

struct entry {
  key name;
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
                                  echo::storage_name<C>() + "' needs a ChainState of that storage" +
                                  (chain ? std::string(", got one of '") + chain->storage() + "'" : std::string()));
    call(&c->state);
  } else {
    if (chain) throw std::invalid_argument("echo_allreduce.reference: comp 'none' keeps no state; pass no chain");
    call(nullptr);
  }
}

/// The entries of one generated translation unit: shard Shard of Shards of the registry.
template <std::size_t Shard, std::size_t Shards>
void add_shard(std::vector<entry>& table) {
  for_each_pair<echo::tool::reference, Shard, Shards>([&](auto q, auto c, const key& k) {
    table.push_back({k, &run<typename decltype(q)::type, typename decltype(c)::type>});
  });
}

/// Every shard's entries (defined by the generated shards.inc), in registry order.
void add_shards(std::vector<entry>& table);

}  // namespace echo_py::ref
