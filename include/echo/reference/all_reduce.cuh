// echo::reference::all_reduce: the Echo algorithm on the host over P simulated ranks.
//
// This is the specification the device path must match bit for bit; it is written to be read,
// not to be fast. Per call, with x' = x + (stored error) on every rank:
//   1. every rank i quantizes each segment j != i of x' and "sends" it to owner j;
//   2. owner j sums, in fp32 and in rank order 0..P-1, its own x'[j] (never quantized) and the
//      P-1 dequantized receipts, giving S;
//   3. owner j quantizes S once, and every rank outputs the same dequantized code, rounded to T.
// So each output value went through at most two quantizations, for any P. A quantizer with a group
// transform (quant::rotated) transforms every whole group of x (before the stored error, which is
// kept in the transformed domain, is added), sums and quantizes there, and transforms the sum's
// decoded values back; the error it keeps for its own segment is S - D(Q(S)), in that domain.
#pragma once

#include "../comp/error_feedback.cuh"
#include "../comp/none.cuh"
#include "../comp/traits.cuh"
#include "../detail/fp_ops.cuh"
#include "../detail/partition.cuh"
#include "../dtype.cuh"
#include "../error.cuh"
#include "../quant/closing.cuh"
#include "../quant/packet.cuh"
#include "../quant/traits.cuh"
#include "../quant/transform.cuh"
#include "chain_state.cuh"
#include "residual_rms_norm.cuh"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace echo::reference {

/// D(Q(v)) for a run of values that starts on a group boundary, through the wire layout. With
/// `blocks`, a quantized run also writes the widened parameters of each of its groups to
/// blocks[k] for every 32 values [32k, 32k + 32) of the run (what comp::step_state stores by).
template <class Quant, class T>
std::vector<float> round_trip(const float* v, size_t len, quant::group_params* blocks = nullptr) {
  std::vector<float> r(len);
  if constexpr (!Quant::quantizes) {
    for (size_t k = 0; k < len; ++k) r[k] = element_traits<T>::to_float(element_traits<T>::from_float(v[k]));
  } else {
    using pk = quant::packet<Quant>;
    const size_t groups = pk::groups_for(len);
    std::vector<unsigned char> wire(pk::bytes(groups));
    pk::encode(v, len, wire.data());
    pk::decode(wire.data(), len, r.data());
    for (size_t k = 0; blocks && k < groups; ++k) {
      quant::wire_params w;
      std::memcpy(&w, wire.data() + pk::param_offset(groups, k), 4);
      const quant::group_params p = Quant::unpack(w);
      for (size_t b = k * Quant::group; b < len && b < (k + 1) * Quant::group; b += 32) blocks[b / 32] = p;
    }
  }
  return r;
}

/// x' of every rank: each input widened, (each whole group) transformed where Q transforms, plus
/// the rank's stored error where the chain continues (ch: null without state).
template <class Q, class Comp, class T>
std::vector<std::vector<float>> entry_values(const std::vector<const T*>& in, size_t n, const chain_state<Comp>* ch) {
  using transform = quant::transform_of_t<Q>;
  constexpr size_t G = transform::active ? static_cast<size_t>(Q::group) : 1;
  std::vector<std::vector<float>> xp(in.size(), std::vector<float>(n));
  for (size_t r = 0; r < in.size(); ++r) {
    for (size_t k = 0; k < n; ++k) xp[r][k] = element_traits<T>::to_float(in[r][k]);
    if constexpr (transform::active)
      for (size_t g = 0; g + G <= n; g += G) transform::forward(&xp[r][g]);
    if constexpr (Comp::keeps_state)
      if (ch->continues())
        for (size_t k = 0; k < n; ++k) xp[r][k] = detail::add_rn(xp[r][k], ch->error(static_cast<int>(r), k));
  }
  return xp;
}

/// Owner j's sum of [b, b + len) in fp32, in rank order: its own x' (exact) and the receipts of the others.
inline std::vector<float> owner_sum(const std::vector<std::vector<float>>& xp, const std::vector<std::vector<float>>& recv,
                                    int j, size_t b, size_t len) {
  const int P = static_cast<int>(xp.size());
  std::vector<float> S(len);
  for (size_t k = 0; k < len; ++k) {
    float acc = j == 0 ? xp[0][b + k] : recv[0][k];
    for (int i = 1; i < P; ++i) acc = detail::add_rn(acc, i == j ? xp[j][b + k] : recv[i][k]);
    S[k] = acc;
  }
  return S;
}

/// f(in, out) with the ranks' buffers cast to the element type t names (the runtime-dtype forms
/// of the reference's collectives).
template <class F>
void with_element_type(dtype t, const std::vector<const void*>& in, const std::vector<void*>& out, F&& f) {
  dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    std::vector<const T*> i(in.size());
    std::vector<T*> o(out.size());
    for (size_t r = 0; r < in.size(); ++r) i[r] = static_cast<const T*>(in[r]);
    for (size_t r = 0; r < out.size(); ++r) o[r] = static_cast<T*>(out[r]);
    f(i, o);
  });
}

template <class Quant, class Comp = comp::none>
class all_reduce {
  static_assert(quant::check_quantizer<Quant>::value && comp::check_compensator<Comp, Quant>::value);
 public:
  using quantizer = Quant;
  using compensator = Comp;
  using chain = chain_state<Comp>;

  explicit all_reduce(int ranks) : ranks_(ranks) {
    ECHO_REQUIRE(ranks >= 1 && ranks <= 1024, "echo::reference::all_reduce", "ranks must be in [1, 1024]");
  }
  int ranks() const { return ranks_; }

  /// in[r] and out[r] hold n elements of rank r (out[r] == in[r] is allowed). With a compensator
  /// the chain is required. `quantizations`, if given, receives per element the number of
  /// quantizations the output value went through (the same on every rank).
  template <class T>
  void operator()(const std::vector<const T*>& in, const std::vector<T*>& out, size_t n, chain* ch = nullptr,
                  std::vector<uint8_t>* quantizations = nullptr) const {
    run<Quant>(in, out, n, ch, quantizations, false);
  }

  /// The call that closes the chain (echo::all_reduce::close_chain): the algorithm through
  /// quant::closing_of_t<Quant> on x plus the chain's stored errors; it keeps no error and leaves
  /// the chain fresh. (The device takes its exact path below the dispatch size instead.)
  template <class T>
  void close_chain(const std::vector<const T*>& in, const std::vector<T*>& out, size_t n, chain* ch = nullptr,
             std::vector<uint8_t>* quantizations = nullptr) const {
    run<quant::closing_of_t<Quant>>(in, out, n, ch, quantizations, Comp::keeps_state);
  }

  /// The call with the residual + RMSNorm epilogue (epi[r]: rank r's residual, weight, hidden
  /// and epsilon): the all-reduce, then reference::residual_rms_norm on every rank's out.
  template <class T>
  void operator()(const std::vector<const T*>& in, const std::vector<T*>& out, size_t n,
                  const std::vector<epilogue::residual_rms_norm<T>>& epi, chain* ch = nullptr) const {
    check_epilogues(epi);
    (*this)(in, out, n, ch);
    for (int r = 0; r < ranks_; ++r) residual_rms_norm(epi[r], out[r], n);
  }
  template <class T>
  void close_chain(const std::vector<const T*>& in, const std::vector<T*>& out, size_t n,
                   const std::vector<epilogue::residual_rms_norm<T>>& epi, chain* ch = nullptr) const {
    check_epilogues(epi);
    close_chain(in, out, n, ch);
    for (int r = 0; r < ranks_; ++r) residual_rms_norm(epi[r], out[r], n);
  }

  /// Runtime-dtype forms for callers that hold a dtype value; throw on an unsupported one.
  void operator()(dtype t, const std::vector<const void*>& in, const std::vector<void*>& out, size_t n,
                  chain* ch = nullptr, std::vector<uint8_t>* quantizations = nullptr) const {
    with_element_type(t, in, out, [&](const auto& i, const auto& o) { (*this)(i, o, n, ch, quantizations); });
  }
  void close_chain(dtype t, const std::vector<const void*>& in, const std::vector<void*>& out, size_t n,
                   chain* ch = nullptr, std::vector<uint8_t>* quantizations = nullptr) const {
    with_element_type(t, in, out, [&](const auto& i, const auto& o) { close_chain(i, o, n, ch, quantizations); });
  }

 private:
  template <class E>
  void check_epilogues(const std::vector<E>& epi) const {
    ECHO_REQUIRE(epi.size() == static_cast<size_t>(ranks_), "echo::reference::all_reduce",
                 "expected " + std::to_string(ranks_) + " epilogues, got " + std::to_string(epi.size()));
  }

  template <class Q, class T>
  void run(const std::vector<const T*>& in, const std::vector<T*>& out, size_t n, chain* ch,
           std::vector<uint8_t>* quantizations, bool closes) const {
    static_assert(is_element<T>::value, "echo::reference::all_reduce: T must be float, echo::half_t or echo::bfloat16_t");
    const char* call = "echo::reference::all_reduce";
    const int P = ranks_;
    ECHO_REQUIRE(in.size() == static_cast<size_t>(P) && out.size() == static_cast<size_t>(P), call,
                 "expected " + std::to_string(P) + " input and output buffers, got " + std::to_string(in.size()) +
                     " and " + std::to_string(out.size()));
    for (int r = 0; r < P; ++r)
      ECHO_REQUIRE(n == 0 || (in[r] && out[r]), call, "null buffer for rank " + std::to_string(r));
    if (Comp::keeps_state) {
      ECHO_REQUIRE(ch != nullptr, call, std::string("compensator ") + Comp::name + " needs a chain_state");
      ECHO_REQUIRE(ch->ranks() == P, call, "chain_state has " + std::to_string(ch->ranks()) + " ranks, expected " + std::to_string(P));
      ch->begin_call(n, quant::transform_domain<Q>());  // last: a rejected call leaves the chain untouched
    }
    if (quantizations) quantizations->assign(n, 0);

    if (P == 1) {  // nothing to reduce: an exact copy, as NCCL gives
      if (n) std::memmove(out[0], in[0], n * sizeof(T));
      return;
    }

    // Entry: x' = (the transform of) x + stored error.
    using transform = quant::transform_of_t<Q>;
    constexpr size_t G = transform::active ? static_cast<size_t>(Q::group) : 1;
    const std::vector<std::vector<float>> xp = entry_values<Q>(in, n, ch);

    std::vector<std::vector<float>> err(Comp::keeps_state ? P : 0, std::vector<float>(n));
    // Per rank, the parameters of the data group of every 32 errors (comp::step_state's step).
    // (A grid without zero, naive_zero_point, or no grid: the storage fits its own step.)
    constexpr bool by_step = chain::stores_in_data_steps && Q::quantizes && Q::holds_zero;
    std::vector<std::vector<quant::group_params>> steps(by_step ? P : 0, std::vector<quant::group_params>((n + 31) / 32));
    const detail::partition part{n, detail::granule_of<Q>(), P};
    for (int j = 0; j < P; ++j) {
      const size_t b = part.begin(j), len = part.size(j);
      if (len == 0) continue;
      // 1. every other rank sends its quantized segment j
      std::vector<std::vector<float>> recv(P);
      for (int i = 0; i < P; ++i) {
        if (i == j) continue;
        recv[i] = round_trip<Q, T>(&xp[i][b], len, by_step ? &steps[i][b / 32] : nullptr);
        if (Comp::keeps_state)
          for (size_t k = 0; k < len; ++k) err[i][b + k] = detail::sub_rn(xp[i][b + k], recv[i][k]);
      }
      // 2. the owner sums in rank order; its own term is exact
      const std::vector<float> S = owner_sum(xp, recv, j, b, len);
      // 3. one quantization of the sum, the same code for every rank
      const std::vector<float> g = round_trip<Q, T>(S.data(), len, by_step ? &steps[j][b / 32] : nullptr);
      std::vector<float> y = g;  // the decoded sum in the input's domain
      if constexpr (transform::active)
        for (size_t k = 0; b + k + G <= n && k < len; k += G) {
          for (size_t i = 0; i < G; ++i) y[k + i] = detail::mul_rn(y[k + i], transform::inv_size);
          transform::inverse_scaled(&y[k]);
        }
      const int depth = !Q::quantizes ? 0 : 2;  // a receipt (1) summed, then the sum (2)
      for (size_t k = 0; k < len; ++k) {
        const T o = element_traits<T>::from_float(y[k]);
        for (int r = 0; r < P; ++r) out[r][b + k] = o;
        if (Comp::keeps_state)
          err[j][b + k] = transform::active ? detail::sub_rn(S[k], g[k]) : detail::sub_rn(S[k], element_traits<T>::to_float(o));
        if (quantizations) (*quantizations)[b + k] = static_cast<uint8_t>(depth);
      }
    }

    if constexpr (Comp::keeps_state) {
      if (closes) return ch->reset();  // a closing call keeps no error and leaves the chain fresh
      for (auto& r : err)
        for (float& e : r) e = Comp::keep(e);
      for (int r = 0; r < P; ++r) ch->set_errors(r, err[r], n, by_step ? steps[r].data() : nullptr);
    }
  }

  int ranks_;
};

}  // namespace echo::reference
