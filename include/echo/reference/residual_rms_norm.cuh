// echo::reference::residual_rms_norm: the specification of epilogue::residual_rms_norm on one
// rank, on the host (every kernel that runs the epilogue matches it bit for bit). The fused call's
// reference is the reference all-reduce followed by this on every rank's out
// (reference::all_reduce's epilogue forms).
#pragma once

#include "../detail/fp_ops.cuh"
#include "../dtype.cuh"
#include "../epilogue/residual_rms_norm.cuh"
#include "../error.cuh"

#include <cstddef>

namespace echo::reference {

/// out holds the all-reduce of n values (rounded to T); afterwards e.residual holds residual + out
/// and out the normalised rows (epilogue/residual_rms_norm.cuh says how, sum_order in what order).
template <class T>
void residual_rms_norm(const epilogue::residual_rms_norm<T>& e, T* out, size_t n) {
  static_assert(is_element<T>::value, "echo::reference::residual_rms_norm: T must be float, echo::half_t or echo::bfloat16_t");
  using traits = element_traits<T>;
  using order = epilogue::sum_order;
  const char* call = "echo::reference::residual_rms_norm";
  if (const char* why = epilogue::argument_error(e, n)) throw error(call, why, __FILE__, __LINE__);
  ECHO_REQUIRE(n == 0 || (e.residual && e.weight && out), call, "null residual, weight or out");
  const size_t H = e.hidden, chunks = H / order::chunk;
  for (size_t row = 0; row < n / H; ++row) {
    T* const res = e.residual + row * H;
    T* const o = out + row * H;
    float part[order::slices][order::lanes] = {};
    for (size_t c = 0; c < chunks; ++c) {
      float& p = part[(c / order::lanes) % order::slices][c % order::lanes];
      for (size_t i = c * order::chunk; i < (c + 1) * order::chunk; ++i) {
        const T r = traits::from_float(detail::add_rn(traits::to_float(res[i]), traits::to_float(o[i])));
        res[i] = r;
        p = detail::fma_rn(traits::to_float(r), traits::to_float(r), p);
      }
    }
    float s[order::slices];
    for (int v = 0; v < order::slices; ++v) {
      float* p = part[v];
      for (int m = order::lanes / 2; m >= 1; m /= 2) {
        float q[order::lanes];
        for (int j = 0; j < order::lanes; ++j) q[j] = detail::add_rn(p[j], p[j ^ m]);
        for (int j = 0; j < order::lanes; ++j) p[j] = q[j];
      }
      s[v] = p[0];
    }
    const float sum = detail::add_rn(detail::add_rn(detail::add_rn(s[0], s[1]), detail::add_rn(s[2], s[3])),
                                     detail::add_rn(detail::add_rn(s[4], s[5]), detail::add_rn(s[6], s[7])));
    const float inv = epilogue::inverse_rms(sum, static_cast<uint32_t>(H), e.epsilon);
    for (size_t i = 0; i < H; ++i)
      o[i] = traits::from_float(epilogue::normalised<T>(traits::to_float(res[i]), inv, traits::to_float(e.weight[i])));
  }
}

}  // namespace echo::reference
