// echo-sim: the runtime choice of quantizer x bits x group x compensator, mapped onto
// echo::reference::all_reduce<Q, C>: the quantizers echo/registry.cuh marks tool::sim, each at
// every (bits, group) of echo-sim's grid, with the compensators marked tool::sim (and, at 4 and 8
// bits of a quantizer marked tool::sim_storage, those marked sim_storage). The instantiations are
// split over generated translation units (examples/CMakeLists.txt) that a parallel build compiles
// side by side.
#pragma once

#include <echo/echo.cuh>
#include <echo/registry.cuh>

#include <algorithm>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace echo_sim {

using bf16 = echo::bfloat16_t;

/// echo-sim's grid: a quantizer marked tool::sim is built at each of these.
inline constexpr int grid_bits[] = {2, 3, 4, 6, 8};
inline constexpr int grid_groups[] = {32, 64, 128, 256};

/// echo-sim's name of a compensator: error_feedback is the exact (fp32) state of the depth
/// experiment, ef_<storage> the device's other storages.
template <class C>
std::string comp_label() {
  if constexpr (!C::keeps_state) return C::name;
  else if constexpr (std::is_same<typename C::storage, float>::value) return C::name;
  else return std::string("ef_") + echo::comp::state_storage<typename C::storage>::name;
}

/// What a block's sum goes through: the all-reduce, or (sequence parallelism) the quantized
/// reduce-scatter followed by an exact all-gather of its segments, which isolates the
/// reduce-scatter's error (one quantization a value; Megatron's contiguous segments of tokens).
enum class collective { all_reduce, reduce_scatter };

/// One Echo configuration: a reference collective and its chain state.
struct reducer {
  virtual ~reducer() = default;
  /// Start of a forward pass: the chain ends.
  virtual void begin_pass() = 0;
  /// out[r] = all_reduce(in[0..P-1]) on every rank r, through the chain.
  virtual void reduce(const std::vector<const bf16*>& in, const std::vector<bf16*>& out, size_t n) = 0;
  std::string quant, comp;
  int bits = 0, group = 0;
  collective coll = collective::all_reduce;
  /// Names this reducer after Q, C and the collective it runs.
  template <class Q, class C>
  void describe(collective k) {
    quant = Q::name;
    comp = comp_label<C>();
    bits = Q::bits;
    group = Q::group;
    coll = k;
  }
  std::string label() const {
    const std::string rs = coll == collective::reduce_scatter ? "rs:" : "";
    if (quant == "none") return rs + "none/" + comp;
    return rs + quant + ":b" + std::to_string(bits) + "g" + std::to_string(group) + "/" + comp;
  }
};

/// What to build: names as on the command line.
struct request {
  std::string quant;  ///< a quantizer marked tool::sim, by name
  int bits, group;    ///< ignored for a quantizer that does not quantize
  std::string comp;   ///< comp_label of a compensator marked tool::sim or sim_storage
  collective coll;
  int ranks;
  size_t n;  ///< elements per call (tokens * width)
};

template <class Q, class C>
struct reducer_impl final : reducer {
  echo::reference::all_reduce<Q, C> ar;
  echo::reference::chain_state<C> chain;
  explicit reducer_impl(const request& r) : ar(r.ranks), chain(r.ranks, r.n) { describe<Q, C>(collective::all_reduce); }
  void begin_pass() override { chain.reset(); }  // one forward pass = one chain
  void reduce(const std::vector<const bf16*>& in, const std::vector<bf16*>& out, size_t n) override {
    ar(in, out, n, &chain);
  }
};

/// The reduce-scatter (echo::reference::reduce_scatter) and an exact all-gather of its segments.
template <class Q, class C>
struct scatter_reducer final : reducer {
  echo::reference::reduce_scatter<Q, C> rs;
  echo::reference::chain_state<C> chain;
  std::vector<std::vector<bf16>> seg;
  explicit scatter_reducer(const request& r)
      : rs(r.ranks), chain(r.ranks, r.n), seg(static_cast<size_t>(r.ranks), std::vector<bf16>(r.n / r.ranks)) {
    describe<Q, C>(collective::reduce_scatter);
  }
  void begin_pass() override { chain.reset(); }
  void reduce(const std::vector<const bf16*>& in, const std::vector<bf16*>& out, size_t n) override {
    const size_t P = seg.size(), m = n / P;
    std::vector<bf16*> s(P);
    for (size_t r = 0; r < P; ++r) s[r] = seg[r].data();
    rs(in, s, n, C::keeps_state ? &chain : nullptr);
    for (size_t r = 0; r < P; ++r)
      for (size_t j = 0; j < P; ++j) std::copy(seg[j].begin(), seg[j].begin() + m, out[r] + j * m);
  }
};

/// The (bits, group) grid of a quantizer template: Q must be F<bits, group>.
template <class Q>
struct family_of {
  static_assert(sizeof(Q) == 0, "echo-sim: a quantizer marked tool::sim must be a template <int bits, int group> "
                                 "(or not quantize at all)");
};
template <template <int, int> class F, int B, int G>
struct family_of<F<B, G>> {
  template <int B2, int G2>
  using at = F<B2, G2>;
};

/// Q with the compensator r.comp names, into out; Storage: the sim_storage ones too.
template <class Q, bool Storage>
void make_comp(const request& r, std::unique_ptr<reducer>& out) {
  echo::for_each_registered<0u, echo::registered_compensators>([&](auto c, std::size_t) {
    using C = typename decltype(c)::type;
    constexpr bool built = (decltype(c)::tools & echo::tool::sim) || (Storage && (decltype(c)::tools & echo::tool::sim_storage));
    if constexpr (built && echo::comp::holds_errors_of<C, Q>::value) {
      if (out || r.comp != comp_label<C>()) return;
      if (r.coll == collective::all_reduce) out = std::make_unique<reducer_impl<Q, C>>(r);
      // A state in units of the data step has no step on the owner's own segment, which the
      // reduce-scatter never quantizes (reference/reduce_scatter.cuh): not built.
      else if constexpr (!echo::comp::stores_in_data_steps<C>::value) out = std::make_unique<scatter_reducer<Q, C>>(r);
    }
  });
}

template <class E, int B, int G>
void make_at(const request& r, std::unique_ptr<reducer>& out) {
  if (out || r.bits != B || r.group != G) return;
  using Q = typename family_of<typename E::type>::template at<B, G>;
  make_comp<Q, (E::tools & echo::tool::sim_storage) && (B == 4 || B == 8)>(r, out);
}

template <class E, int B, std::size_t... Gi>
void make_bits(const request& r, std::unique_ptr<reducer>& out, std::index_sequence<Gi...>) {
  (make_at<E, B, grid_groups[Gi]>(r, out), ...);
}

template <class E, std::size_t... Bi>
void make_grid(const request& r, std::unique_ptr<reducer>& out, std::index_sequence<Bi...>) {
  (make_bits<E, grid_bits[Bi]>(r, out, std::make_index_sequence<std::size(grid_groups)>{}), ...);
}

/// The reducer r names if its quantizer is in shard Shard of Shards (else null): the content of
/// one generated translation unit.
template <std::size_t Shard, std::size_t Shards>
std::unique_ptr<reducer> make_in_shard(const request& r) {
  std::unique_ptr<reducer> out;
  echo::for_each_registered<echo::tool::sim, echo::registered_quantizers, Shard, Shards>([&](auto e, std::size_t) {
    using E = decltype(e);
    using Q = typename E::type;
    if (r.quant != Q::name) return;
    if constexpr (!Q::quantizes) make_comp<Q, false>(r, out);
    else make_grid<E>(r, out, std::make_index_sequence<std::size(grid_bits)>{});
  });
  return out;
}

/// Every shard's make_in_shard (generated), in turn; throws std::invalid_argument if none builds r.
std::unique_ptr<reducer> make_reducer(const request& r);

/// The names --quant and --comp accept.
std::vector<std::string> quant_names();
std::vector<std::string> comp_names();
/// The quantizers built with the ef_* storages too (tool::sim_storage).
std::vector<std::string> storage_quant_names();

}  // namespace echo_sim
