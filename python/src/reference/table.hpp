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
/// reference::reduce_scatter: in[r] n values, out[r] rank r's n / P.
using scatter_fn = void (*)(echo::dtype, const std::vector<const void*>& in, const std::vector<void*>& out, size_t n,
                            chain_base* chain);
/// reference::all_gather: in[r] rank r's m values, out[r] P m.
using gather_fn = void (*)(echo::dtype, const std::vector<const void*>& in, const std::vector<void*>& out, size_t m);

struct entry {
  key name;
  run_fn run;
  scatter_fn scatter;  ///< null: not compiled (tool::reference_sp), or a state in data steps
  gather_fn gather;    ///< null: not compiled (tool::reference_sp)
};

/// C's chain, or null without state; throws where the chain is missing or of another storage.
template <class C>
echo::reference::chain_state<C>* chain_of(chain_base* chain) {
  if constexpr (C::keeps_state) {
    auto* c = dynamic_cast<chain_impl<C>*>(chain);
    if (!c)
      throw std::invalid_argument(std::string("echo_allreduce.reference: error_feedback with storage '") +
                                  echo::storage_name<C>() + "' needs a ChainState of that storage" +
                                  (chain ? std::string(", got one of '") + chain->storage() + "'" : std::string()));
    return &c->state;
  } else {
    if (chain) throw std::invalid_argument("echo_allreduce.reference: comp 'none' keeps no state; pass no chain");
    return nullptr;
  }
}

template <class Q, class C>
void run(echo::dtype t, const std::vector<const void*>& in, const std::vector<void*>& out, size_t n, chain_base* chain,
         bool closes) {
  auto* ch = chain_of<C>(chain);
  const echo::reference::all_reduce<Q, C> ar(static_cast<int>(in.size()));
  if (closes) ar.close_chain(t, in, out, n, ch);
  else ar(t, in, out, n, ch);
}

template <class Q, class C>
void scatter(echo::dtype t, const std::vector<const void*>& in, const std::vector<void*>& out, size_t n, chain_base* chain) {
  auto* ch = chain_of<C>(chain);
  const echo::reference::reduce_scatter<Q, C> rs(static_cast<int>(in.size()));
  echo::reference::with_element_type(t, in, out, [&](const auto& i, const auto& o) { rs(i, o, n, ch); });
}

/// Q's entry gathers as echo::all_reduce<Q>::all_gather does: with Q's closing quantizer.
template <class Q>
void gather(echo::dtype t, const std::vector<const void*>& in, const std::vector<void*>& out, size_t m) {
  const echo::reference::all_gather<echo::quant::closing_of_t<Q>> ag(static_cast<int>(in.size()));
  echo::reference::with_element_type(t, in, out, [&](const auto& i, const auto& o) { ag(i, o, m); });
}

/// The entries of one generated translation unit: shard Shard of Shards of the registry.
template <std::size_t Shard, std::size_t Shards>
void add_shard(std::vector<entry>& table) {
  for_each_pair<echo::tool::reference, Shard, Shards>([&](auto q, auto c, const key& k) {
    using Q = typename decltype(q)::type;
    using C = typename decltype(c)::type;
    entry e{k, &run<Q, C>, nullptr, nullptr};
    if constexpr ((decltype(q)::tools & echo::tool::reference_sp) != 0) {
      e.gather = &gather<Q>;
      if constexpr (!echo::comp::stores_in_data_steps<C>::value) e.scatter = &scatter<Q, C>;
    }
    table.push_back(e);
  });
}


}  // namespace echo_py::ref
