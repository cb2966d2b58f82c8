// echo-perf's compiled instantiations (instances.cuh says which). One translation unit: only one
// may include echo/all_reduce.cuh today (see harness/echo_runner.cuh).
#include "../harness/echo_runner.cuh"
#include "instances.cuh"

#include <echo/defaults.cuh>
#include <echo/registry.cuh>

#include <string>
#include <type_traits>

namespace echo_perf {
namespace {

using ipc = echo::transport::cuda_ipc::tag;
using nccl = echo::transport::nccl::tag;

/// The error-feedback compensator echo-perf times with Q: the first of the registered entries E...
/// that keeps state and holds Q's errors.
template <class Q, class... E>
struct first_ef {
  static_assert(sizeof(Q) == 0, "echo-perf: no compensator marked tool::perf holds this quantizer's errors");
};
template <class Q, class E, class... R>
struct first_ef<Q, E, R...> {
  using C = typename E::type;
  using type = typename std::conditional_t<C::keeps_state && echo::comp::holds_errors_of<C, Q>::value,
                                           std::enable_if<true, C>, first_ef<Q, R...>>::type;
};
template <class Q, class L>
struct perf_ef_in;
template <class Q, class... E>
struct perf_ef_in<Q, echo::type_list<E...>> : first_ef<Q, E...> {};
template <class Q>
using perf_ef = perf_ef_in<Q, echo::registered_with_t<echo::tool::perf, echo::registered_compensators>>;

template <class Q, class C, class T, class Transport>
std::unique_ptr<runner> make_one(bench_context& ctx, const echo_runner_options& o) {
  return std::make_unique<echo_bench::echo_runner<Q, C, T, Transport>>(ctx, o);
}

/// The compensator x transport x element type instantiations of Q (tool::perf).
template <class Q>
std::unique_ptr<runner> make_full(bench_context& ctx, const config& c, const echo_runner_options& o) {
  using ef = typename perf_ef<Q>::type;
  return echo::dispatch_dtype(c.type, [&](auto tag) -> std::unique_ptr<runner> {
    using T = decltype(tag);
    const bool with_ef = c.comp == comp_kind::error_feedback;
    if (c.transport == transport_kind::cuda_ipc)
      return with_ef ? make_one<Q, ef, T, ipc>(ctx, o) : make_one<Q, echo::comp::none, T, ipc>(ctx, o);
    return with_ef ? make_one<Q, ef, T, nccl>(ctx, o) : make_one<Q, echo::comp::none, T, nccl>(ctx, o);
  });
}

/// bf16 over cuda_ipc only (tool::perf_bf16); echo-perf's flag check refuses the rest.
template <class Q>
std::unique_ptr<runner> make_bf16(bench_context& ctx, const config& c, const echo_runner_options& o) {
  using ef = typename perf_ef<Q>::type;
  if (c.comp == comp_kind::error_feedback) return make_one<Q, ef, echo::bfloat16_t, ipc>(ctx, o);
  return make_one<Q, echo::comp::none, echo::bfloat16_t, ipc>(ctx, o);
}

/// -q's name of Q: its own, "rotated" for a rotated one without a clip, "default" for
/// echo::default_quantizer (the names the docs' commands use), else its name and what wraps it.
template <class Q>
std::string name_of() {
  const echo::quantizer_key k = echo::key_of<Q>();
  if (std::is_same<Q, echo::default_quantizer>::value) return "default";
  if (k.rotate && k.clip == 1024) return "rotated";
  return std::string(k.name) + (k.rotate ? "+rot" : "") + (k.clip != 1024 ? "+clip" + std::to_string(k.clip) : "");
}

template <class Q>
std::string type_name_of() {
  const echo::quantizer_key k = echo::key_of<Q>();
  if (!Q::quantizes) return k.name;
  std::string s = std::string(k.name) + "<" + std::to_string(k.bits) + "," + std::to_string(k.group) + ">";
  if (k.clip != 1024) s = "clipped<" + s + "," + std::to_string(k.clip) + ">";
  if (k.rotate) s = "rotated<" + s + ">";
  return s;
}

}  // namespace

const std::vector<instance>& instances() {
  static const std::vector<instance> v = [] {
    std::vector<instance> out;
    // The full ones, then the bf16 / cuda_ipc ones, each in the registry's order.
    echo::for_each_registered<echo::tool::perf, echo::registered_quantizers>([&](auto q, std::size_t) {
      using Q = typename decltype(q)::type;
      constexpr echo::quantizer_key k = echo::key_of<Q>();
      out.push_back({name_of<Q>(), k.bits, k.group, type_name_of<Q>(), echo::storage_name<typename perf_ef<Q>::type>(),
                     false, &make_full<Q>});
    });
    echo::for_each_registered<echo::tool::perf_bf16, echo::registered_quantizers>([&](auto q, std::size_t) {
      using Q = typename decltype(q)::type;
      constexpr echo::quantizer_key k = echo::key_of<Q>();
      out.push_back({name_of<Q>(), k.bits, k.group, type_name_of<Q>(), echo::storage_name<typename perf_ef<Q>::type>(),
                     true, &make_bf16<Q>});
    });
    return out;
  }();
  return v;
}

}  // namespace echo_perf
