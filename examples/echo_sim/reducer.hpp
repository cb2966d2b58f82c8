// echo-sim: the runtime choice of quantizer x bits x group x compensator, mapped onto
// echo::reference::all_reduce<Q, C>. The instantiations are spread over one translation unit per
// quantizer (reducer_<quantizer>.cpp) so that a parallel build compiles them side by side.
#pragma once

#include <echo/echo.cuh>

#include <memory>
#include <string>
#include <type_traits>
#include <stdexcept>
#include <string>
#include <vector>

namespace echo_sim {

using bf16 = echo::bfloat16_t;

enum class quant_kind { zero_aware, naive_zero_point, symmetric, none };
/// error_feedback keeps the error exactly (float state), as the depth experiment always did; the
/// ef_* kinds keep it as the device's other storage options (zero_aware, 4 or 8 bits only).
enum class comp_kind { none, error_feedback, ef_bf16, ef_int8, ef_int4, ef_step8, ef_step4 };

inline const char* comp_label(comp_kind c) {
  switch (c) {
    case comp_kind::none: return "none";
    case comp_kind::error_feedback: return "error_feedback";
    case comp_kind::ef_bf16: return "ef_bf16";
    case comp_kind::ef_int8: return "ef_int8";
    case comp_kind::ef_int4: return "ef_int4";
    case comp_kind::ef_step8: return "ef_step8";
    case comp_kind::ef_step4: return "ef_step4";
  }
  return "?";
}

/// One Echo configuration: a reference all-reduce and its chain state.
struct reducer {
  virtual ~reducer() = default;
  /// Start of a forward pass: the chain ends.
  virtual void begin_pass() = 0;
  /// out[r] = all_reduce(in[0..P-1]) on every rank r, through the chain.
  virtual void reduce(const std::vector<const bf16*>& in, const std::vector<bf16*>& out, size_t n) = 0;
  std::string quant, comp;
  int bits = 0, group = 0;
  std::string label() const {
    if (quant == "none") return "none/" + comp;
    return quant + ":b" + std::to_string(bits) + "g" + std::to_string(group) + "/" + comp;
  }
};

struct make_args {
  int ranks;
  size_t n;  ///< elements per call (tokens * width)
};

template <class Q, class C>
struct reducer_impl final : reducer {
  echo::reference::all_reduce<Q, C> ar;
  echo::reference::chain_state<C> chain;
  reducer_impl(const make_args& a, comp_kind k) : ar(a.ranks), chain(a.ranks, a.n) {
    quant = Q::name;
    comp = comp_label(k);
    bits = Q::bits;
    group = Q::group;
  }
  void begin_pass() override { chain.reset(); }  // one forward pass = one chain
  void reduce(const std::vector<const bf16*>& in, const std::vector<bf16*>& out, size_t n) override {
    ar(in, out, n, &chain);
  }
};

template <class Q>
std::unique_ptr<reducer> make_comp(comp_kind c, const make_args& a) {
  using namespace echo::comp;
  switch (c) {
    case comp_kind::none: return std::make_unique<reducer_impl<Q, none>>(a, c);
    case comp_kind::error_feedback: return std::make_unique<reducer_impl<Q, error_feedback<float>>>(a, c);
    default: break;
  }
  if constexpr (std::is_same<Q, echo::quant::zero_aware<Q::bits, Q::group>>::value && (Q::bits == 4 || Q::bits == 8)) {
    switch (c) {
      case comp_kind::ef_bf16: return std::make_unique<reducer_impl<Q, error_feedback<echo::bfloat16_t>>>(a, c);
      case comp_kind::ef_int8: return std::make_unique<reducer_impl<Q, error_feedback<int8_state>>>(a, c);
      case comp_kind::ef_int4: return std::make_unique<reducer_impl<Q, error_feedback<int4_state>>>(a, c);
      case comp_kind::ef_step8: return std::make_unique<reducer_impl<Q, error_feedback<step8_state>>>(a, c);
      case comp_kind::ef_step4: return std::make_unique<reducer_impl<Q, error_feedback<step4_state>>>(a, c);
      default: break;
    }
  }
  throw std::invalid_argument(std::string("echo-sim: compensator ") + comp_label(c) + " is built for zero_aware 4 and 8 bits only");
}

template <template <int, int> class Q, int B>
std::unique_ptr<reducer> make_group(int g, comp_kind c, const make_args& a) {
  switch (g) {
    case 32: return make_comp<Q<B, 32>>(c, a);
    case 64: return make_comp<Q<B, 64>>(c, a);
    case 128: return make_comp<Q<B, 128>>(c, a);
    case 256: return make_comp<Q<B, 256>>(c, a);
  }
  throw std::invalid_argument("echo-sim: group " + std::to_string(g) + " is not one of 32, 64, 128, 256");
}

template <template <int, int> class Q>
std::unique_ptr<reducer> make_bits(int b, int g, comp_kind c, const make_args& a) {
  switch (b) {
    case 2: return make_group<Q, 2>(g, c, a);
    case 3: return make_group<Q, 3>(g, c, a);
    case 4: return make_group<Q, 4>(g, c, a);
    case 6: return make_group<Q, 6>(g, c, a);
    case 8: return make_group<Q, 8>(g, c, a);
  }
  throw std::invalid_argument("echo-sim: bits " + std::to_string(b) + " is not one of 2, 3, 4, 6, 8");
}

// One per translation unit.
std::unique_ptr<reducer> make_zero_aware(int bits, int group, comp_kind c, const make_args& a);
std::unique_ptr<reducer> make_naive_zero_point(int bits, int group, comp_kind c, const make_args& a);
std::unique_ptr<reducer> make_symmetric(int bits, int group, comp_kind c, const make_args& a);

inline std::unique_ptr<reducer> make_reducer(quant_kind q, int bits, int group, comp_kind c, const make_args& a) {
  switch (q) {
    case quant_kind::zero_aware: return make_zero_aware(bits, group, c, a);
    case quant_kind::naive_zero_point: return make_naive_zero_point(bits, group, c, a);
    case quant_kind::symmetric: return make_symmetric(bits, group, c, a);
    case quant_kind::none: return make_comp<echo::quant::none>(c, a);
  }
  throw std::invalid_argument("echo-sim: unknown quantizer");
}

}  // namespace echo_sim
