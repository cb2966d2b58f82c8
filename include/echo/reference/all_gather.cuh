// echo::reference::all_gather: the second half of the all-reduce that sequence-parallel training
// runs instead of it, on the host over P simulated ranks; the specification of the
// sequence-parallel all-gather. Rank r's segment (m values, a whole number of the quantizer's
// groups) goes as one quantizer code; D(Q(x_r)) (transformed back) rounded to T is segment r of
// every rank's output, the owner's included, so every rank holds the same bits. No error feedback:
// what an all-gather injects is not added back into the stream it came from. echo::all_reduce's
// all_gather codes with its closing quantizer: its spec is all_gather<closing_of_t<Quant>>.
#pragma once

#include "../detail/fp_ops.cuh"
#include "../dtype.cuh"
#include "../error.cuh"
#include "../quant/traits.cuh"
#include "../quant/transform.cuh"
#include "all_reduce.cuh"
#include "segments.cuh"

#include <string>
#include <vector>

namespace echo::reference {

template <class Quant>
class all_gather {
  static_assert(quant::check_quantizer<Quant>::value);

 public:
  using quantizer = Quant;

  explicit all_gather(int ranks) : ranks_(ranks) {
    ECHO_REQUIRE(ranks >= 1 && ranks <= 1024, "echo::reference::all_gather", "ranks must be in [1, 1024]");
  }
  int ranks() const { return ranks_; }

  /// in[r]: rank r's m values; out[r]: P m values, segment j of every rank's the same decoded codes
  /// of rank j's input.
  template <class T>
  void operator()(const std::vector<const T*>& in, const std::vector<T*>& out, size_t m) const {
    static_assert(is_element<T>::value, "echo::reference::all_gather: T must be float, echo::half_t or echo::bfloat16_t");
    const char* call = "echo::reference::all_gather";
    const int P = ranks_;
    ECHO_REQUIRE(in.size() == static_cast<size_t>(P) && out.size() == static_cast<size_t>(P), call,
                 "expected " + std::to_string(P) + " input and output buffers");
    if (const char* why = segment_error<Quant>(m * static_cast<size_t>(P), P)) throw error(call, why, __FILE__, __LINE__);
    for (int r = 0; r < P; ++r) ECHO_REQUIRE(m == 0 || (in[r] && out[r]), call, "null buffer for rank " + std::to_string(r));
    using transform = quant::transform_of_t<Quant>;
    constexpr size_t G = transform::active ? static_cast<size_t>(Quant::group) : 1;
    for (int j = 0; j < P; ++j) {
      std::vector<float> x(m);
      for (size_t k = 0; k < m; ++k) x[k] = element_traits<T>::to_float(in[j][k]);
      std::vector<T> seg(m);
      if (P == 1) {
        for (size_t k = 0; k < m; ++k) seg[k] = in[j][k];
      } else {
        if constexpr (transform::active)
          for (size_t g = 0; g + G <= m; g += G) transform::forward(&x[g]);
        const std::vector<float> y = back_from_domain<Quant, T>(round_trip<Quant, T>(x.data(), m));
        for (size_t k = 0; k < m; ++k) seg[k] = element_traits<T>::from_float(y[k]);
      }
      for (int r = 0; r < P; ++r)
        for (size_t k = 0; k < m; ++k) out[r][static_cast<size_t>(j) * m + k] = seg[k];
    }
  }

 private:
  int ranks_;
};

}  // namespace echo::reference
