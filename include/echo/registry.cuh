// The instantiations Echo's tools compile. The torch ops, the Python package's host reference,
// echo-perf and echo-sim all read these two lists and nothing else, so a new quantizer or
// compensator reaches every tool through one line here (and the #include of its header). An
// entry's mask says which tools build it: each tool's build time grows with its entries, so only
// what a tool is used for is in it. Host code: the reference builds it with any C++17 compiler.
#pragma once

#include "comp/error_feedback.cuh"
#include "comp/none.cuh"
#include "comp/state_storage.cuh"
#include "comp/traits.cuh"
#include "quant/clipped.cuh"
#include "quant/naive_zero_point.cuh"
#include "quant/none.cuh"
#include "quant/rotated.cuh"
#include "quant/symmetric.cuh"
#include "quant/traits.cuh"
#include "quant/transform.cuh"
#include "quant/zero_aware.cuh"

#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

namespace echo {

/// What an entry is compiled into: a registered_* entry's mask is an OR of these.
struct tool {
  /// echo_allreduce's host reference (echo_allreduce.reference), with every compensator marked
  /// reference that holds the quantizer's errors.
  static constexpr unsigned reference = 1u << 0;
  /// With reference: its sequence-parallel reduce-scatter and all-gather too (reference/
  /// reduce_scatter.cuh, all_gather.cuh; the reduce-scatter not with a state stored in data steps).
  static constexpr unsigned reference_sp = 1u << 7;
  /// The torch ops over transport::cuda_ipc, with every compensator marked torch (each pair is a
  /// full set of device pipelines: about a minute of nvcc).
  static constexpr unsigned torch = 1u << 1;
  /// The torch ops over transport::nccl too.
  static constexpr unsigned torch_nccl = 1u << 2;
  /// With torch: the torch ops' cuda_ipc object serves the sequence-parallel reduce-scatter and
  /// all-gather too (echo::sequence_parallel), with every compensator marked torch_sp (their
  /// kernels: about half a pipeline set more a pair).
  static constexpr unsigned torch_sp = 1u << 8;
  /// echo-perf: bf16, fp16 and fp32 over both transports, with comp::none and the first
  /// compensator marked perf that holds the quantizer's errors.
  static constexpr unsigned perf = 1u << 3;
  /// echo-perf, bf16 over cuda_ipc only (a cost comparison, not a product path).
  static constexpr unsigned perf_bf16 = 1u << 4;
  /// echo-sim: the quantizer's template at every (bits, group) of echo-sim's grid, with every
  /// compensator marked sim (a quantizer that does not quantize: itself).
  static constexpr unsigned sim = 1u << 5;
  /// echo-sim, at 4 and 8 bits of a quantizer marked sim: the compensators marked sim_storage too
  /// (the device's storage options, against the exact state of the depth experiment).
  static constexpr unsigned sim_storage = 1u << 6;
};

template <class... T>
struct type_list {
  static constexpr std::size_t size = sizeof...(T);
  template <std::size_t I>
  using at = std::tuple_element_t<I, std::tuple<T...>>;
};

template <class Q, unsigned Tools>
struct registered_quantizer {
  static_assert(quant::check_quantizer<Q>::value, "");
  static_assert(Tools != 0, "echo: a registered quantizer names at least one tool (echo::tool)");
  using type = Q;
  static constexpr unsigned tools = Tools;
};

template <class C, unsigned Tools>
struct registered_compensator {
  static_assert(comp::is_compensator<C>::value,
                "echo: a registered compensator needs name, keeps_state and state_bytes(n) (comp/compensator.cuh)");
  static_assert(Tools != 0, "echo: a registered compensator names at least one tool (echo::tool)");
  using type = C;
  static constexpr unsigned tools = Tools;
};

namespace detail {
template <class Q, int R>
using clip = quant::clipped<Q, R>;
template <class Q>
using rot = quant::rotated<Q>;
template <int B, int G>
using za = quant::zero_aware<B, G>;
}  // namespace detail

// clang-format off
/// Every quantizer a tool compiles, one line each.
using registered_quantizers = type_list<
  registered_quantizer<quant::zero_aware<4, 32>, tool::reference | tool::torch>,
  registered_quantizer<quant::zero_aware<4, 64>, tool::reference | tool::torch>,
  registered_quantizer<quant::zero_aware<4, 128>, tool::reference | tool::reference_sp | tool::torch | tool::torch_nccl | tool::perf | tool::sim | tool::sim_storage>,
  registered_quantizer<quant::zero_aware<8, 32>, tool::reference | tool::torch>,
  registered_quantizer<quant::zero_aware<8, 64>, tool::reference | tool::torch>,
  registered_quantizer<quant::zero_aware<8, 128>, tool::reference | tool::reference_sp | tool::torch | tool::torch_nccl | tool::perf>,
  registered_quantizer<quant::symmetric<4, 128>, tool::reference | tool::torch | tool::perf | tool::sim>,
  registered_quantizer<quant::naive_zero_point<4, 128>, tool::reference | tool::torch | tool::perf | tool::sim>,
  registered_quantizer<quant::none, tool::reference | tool::reference_sp | tool::torch | tool::torch_sp | tool::torch_nccl | tool::perf | tool::sim>,
  // The outlier-robust 4-bit path (docs/quality.md): rotated groups, clipped ranges (R / 1024 of
  // the range), both, and the rotated 8-bit code a closing call sends.
  registered_quantizer<detail::rot<detail::za<4, 32>>, tool::reference | tool::torch>,
  registered_quantizer<detail::rot<detail::za<4, 64>>, tool::reference | tool::torch>,
  registered_quantizer<detail::rot<detail::za<4, 128>>, tool::reference | tool::torch | tool::perf_bf16>,
  registered_quantizer<detail::rot<detail::za<8, 128>>, tool::reference | tool::reference_sp | tool::torch>,
  registered_quantizer<detail::clip<detail::za<4, 128>, 870>, tool::reference | tool::torch>,
  registered_quantizer<detail::clip<detail::za<4, 128>, 952>, tool::reference>,
  registered_quantizer<detail::rot<detail::clip<detail::za<4, 64>, 870>>, tool::reference | tool::torch>,
  registered_quantizer<detail::rot<detail::clip<detail::za<4, 128>, 870>>, tool::reference | tool::reference_sp | tool::torch | tool::torch_sp | tool::perf_bf16>,
  // The clip ratios the outlier study swept (host only).
  registered_quantizer<detail::rot<detail::clip<detail::za<4, 64>, 952>>, tool::reference>,
  registered_quantizer<detail::rot<detail::clip<detail::za<4, 64>, 819>>, tool::reference>,
  registered_quantizer<detail::rot<detail::clip<detail::za<4, 128>, 973>>, tool::reference>,
  registered_quantizer<detail::rot<detail::clip<detail::za<4, 128>, 952>>, tool::reference>,
  registered_quantizer<detail::rot<detail::clip<detail::za<4, 128>, 922>>, tool::reference>,
  registered_quantizer<detail::rot<detail::clip<detail::za<4, 128>, 819>>, tool::reference>,
  registered_quantizer<detail::rot<detail::clip<detail::za<4, 128>, 768>>, tool::reference>,
  registered_quantizer<detail::rot<detail::clip<detail::za<4, 128>, 717>>, tool::reference>>;

/// Every compensator a tool compiles, one line each. Order matters to echo-perf only: its
/// error-feedback row is the first one marked perf that holds the quantizer's errors.
using registered_compensators = type_list<
  registered_compensator<comp::none, tool::reference | tool::torch | tool::torch_sp | tool::torch_nccl | tool::perf | tool::sim>,
  registered_compensator<comp::error_feedback<comp::step8_state>, tool::reference | tool::torch | tool::torch_nccl | tool::perf | tool::sim_storage>,
  registered_compensator<comp::error_feedback<comp::int8_state>, tool::reference | tool::torch | tool::torch_sp | tool::torch_nccl | tool::perf | tool::sim_storage>,
  registered_compensator<comp::error_feedback<bfloat16_t>, tool::reference | tool::torch | tool::torch_nccl | tool::sim_storage>,
  registered_compensator<comp::error_feedback<float>, tool::reference | tool::torch | tool::torch_nccl | tool::sim>,
  registered_compensator<comp::error_feedback<comp::int4_state>, tool::sim_storage>,
  registered_compensator<comp::error_feedback<comp::step4_state>, tool::sim_storage>>;
// clang-format on

/// How the tools name a quantizer at run time (a Python argument, a command-line flag).
struct quantizer_key {
  const char* name;
  int bits;    ///< 0 for a quantizer that does not quantize
  int group;   ///< 0 for a quantizer that does not quantize
  bool rotate;  ///< a group transform (quant::rotated)
  int clip;     ///< quant::clipped's ratio in 1024ths (1024: none)
};

template <class Q>
constexpr quantizer_key key_of() {
  return {Q::name, Q::quantizes ? int(Q::bits) : 0, Q::quantizes ? int(Q::group) : 0,
          quant::transform_of_t<Q>::active, quant::clip_of<Q>::ratio_1024};
}

/// How the tools name a compensator's state: "" for one that keeps none, else its storage's name,
/// except "float" for fp32, as the Python package spells it.
template <class C>
constexpr const char* storage_name() {
  if constexpr (!C::keeps_state) return "";
  else if constexpr (std::is_same<typename C::storage, float>::value) return "float";
  else return comp::state_storage<typename C::storage>::name;
}

namespace detail {
template <unsigned Tools, class List>
struct registered_with;
template <unsigned Tools>
struct registered_with<Tools, type_list<>> {
  using type = type_list<>;
};
template <unsigned Tools, class H, class... T>
struct registered_with<Tools, type_list<H, T...>> {
  template <class L>
  struct prepend;
  template <class... U>
  struct prepend<type_list<U...>> {
    using type = type_list<H, U...>;
  };
  using rest = typename registered_with<Tools, type_list<T...>>::type;
  using type = std::conditional_t<(H::tools & Tools) == Tools, typename prepend<rest>::type, rest>;
};

template <bool Take, class E, class F>
void visit_if(F& f, std::size_t i) {
  if constexpr (Take) f(E{}, i);
}

template <std::size_t Shard, std::size_t Shards, class... E, class F, std::size_t... I>
void visit_shard(type_list<E...>, F& f, std::index_sequence<I...>) {
  (visit_if<I % Shards == Shard, E>(f, I), ...);
}
}  // namespace detail

/// The entries of a registry list (registered_quantizers or registered_compensators) marked with
/// every bit of Tools, in the list's order.
template <unsigned Tools, class List>
using registered_with_t = typename detail::registered_with<Tools, List>::type;

/// Calls f(E{}, i) for the i-th entry E of registered_with_t<Tools, List> (E::type: the quantizer or
/// compensator; E::tools: its mask), for the i with i % Shards == Shard only: a tool splits its instantiations over Shards translation units this
/// way, so a parallel build compiles them side by side and no build file keeps a count of them.
template <unsigned Tools, class List, std::size_t Shard = 0, std::size_t Shards = 1, class F>
void for_each_registered(F&& f) {
  static_assert(Shards > 0 && Shard < Shards, "echo: for_each_registered needs Shard < Shards");
  using list = registered_with_t<Tools, List>;
  detail::visit_shard<Shard, Shards>(list{}, f, std::make_index_sequence<list::size>{});
}

}  // namespace echo
