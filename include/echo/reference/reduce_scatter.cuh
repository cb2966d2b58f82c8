// echo::reference::reduce_scatter: the first half of the all-reduce that sequence-parallel
// training runs instead of it (Megatron-LM, TorchTitan), on the host over P simulated ranks; the
// specification of the sequence-parallel reduce-scatter.
//
// Layout (Megatron's sequence dimension): a message of n values is P equal segments, contiguous by
// rank: rank r owns [r m, (r + 1) m), m = n / P, a whole number of the quantizer's groups
// (segments.cuh), so the segments are the all-reduce's (detail::partition) for the same n.
//
// With x' = (the transform of) x + stored error on every rank:
//   1. every rank i quantizes each segment j != i of x' and sends it to owner j, keeping the send
//      error x'_i - D(Q(x'_i)) there;
//   2. owner j sums in fp32, in rank order, its own x'_j (never quantized) and the P - 1 decoded
//      receipts, giving S;
//   3. owner j outputs S (transformed back) rounded to T. Each value went through one
//      quantization; the owner's own segment keeps no error (its output is the exact sum, rounded
//      once, as NCCL's reduce-scatter rounds it).
#pragma once

#include "../comp/none.cuh"
#include "../comp/traits.cuh"
#include "../detail/fp_ops.cuh"
#include "../dtype.cuh"
#include "../error.cuh"
#include "../quant/traits.cuh"
#include "../quant/transform.cuh"
#include "all_reduce.cuh"
#include "chain_state.cuh"
#include "segments.cuh"

#include <string>
#include <vector>

namespace echo::reference {

template <class Quant, class Comp = comp::none>
class reduce_scatter {
  static_assert(quant::check_quantizer<Quant>::value && comp::check_compensator<Comp, Quant>::value);
  static_assert(!comp::stores_in_data_steps<Comp>::value,
                "echo::reference::reduce_scatter: a state stored in units of the data group's step (step8_state, "
                "step4_state) has no step on the owner's own segment, which is never quantized: use int8_state, "
                "int4_state, bfloat16_t or float");

 public:
  using quantizer = Quant;
  using compensator = Comp;
  using chain = chain_state<Comp>;

  explicit reduce_scatter(int ranks) : ranks_(ranks) {
    ECHO_REQUIRE(ranks >= 1 && ranks <= 1024, "echo::reference::reduce_scatter", "ranks must be in [1, 1024]");
  }
  int ranks() const { return ranks_; }

  /// in[r]: rank r's n values; out[r]: n / P values, rank r's segment of the sum. With a
  /// compensator the chain (of capacity >= n) is required; it keeps the send errors.
  template <class T>
  void operator()(const std::vector<const T*>& in, const std::vector<T*>& out, size_t n, chain* ch = nullptr) const {
    static_assert(is_element<T>::value, "echo::reference::reduce_scatter: T must be float, echo::half_t or echo::bfloat16_t");
    const char* call = "echo::reference::reduce_scatter";
    const int P = ranks_;
    ECHO_REQUIRE(in.size() == static_cast<size_t>(P) && out.size() == static_cast<size_t>(P), call,
                 "expected " + std::to_string(P) + " input and output buffers");
    if (const char* why = segment_error<Quant>(n, P)) throw error(call, why, __FILE__, __LINE__);
    for (int r = 0; r < P; ++r) ECHO_REQUIRE(n == 0 || (in[r] && out[r]), call, "null buffer for rank " + std::to_string(r));
    if constexpr (Comp::keeps_state) {
      ECHO_REQUIRE(ch != nullptr, call, std::string("compensator ") + Comp::name + " needs a chain_state");
      ECHO_REQUIRE(ch->ranks() == P, call, "chain_state has " + std::to_string(ch->ranks()) + " ranks");
      ch->begin_call(n, quant::transform_domain<Quant>());
    }
    const size_t m = n / static_cast<size_t>(P);
    if (P == 1) {
      for (size_t k = 0; k < n; ++k) out[0][k] = in[0][k];
      return;
    }
    const std::vector<std::vector<float>> xp = entry_values<Quant>(in, n, ch);
    std::vector<std::vector<float>> err(Comp::keeps_state ? P : 0, std::vector<float>(n, 0.0f));
    for (int j = 0; j < P; ++j) {
      const size_t b = static_cast<size_t>(j) * m;
      std::vector<std::vector<float>> recv(P);
      for (int i = 0; i < P; ++i) {
        if (i == j) continue;
        recv[i] = round_trip<Quant, T>(&xp[i][b], m);
        if constexpr (Comp::keeps_state)
          for (size_t k = 0; k < m; ++k) err[i][b + k] = detail::sub_rn(xp[i][b + k], recv[i][k]);
      }
      const std::vector<float> S = owner_sum(xp, recv, j, b, m);
      const std::vector<float> y = back_from_domain<Quant, T>(S);
      for (size_t k = 0; k < m; ++k) out[j][k] = element_traits<T>::from_float(y[k]);
    }
    if constexpr (Comp::keeps_state) {
      for (auto& r : err)
        for (float& e : r) e = Comp::keep(e);
      for (int r = 0; r < P; ++r) ch->set_errors(r, err[r], n);
    }
  }

 private:
  int ranks_;
};

}  // namespace echo::reference
