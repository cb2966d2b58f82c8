// comp::error_feedback<Storage>: each rank keeps the error it injected on the last call of a
// chain and adds it to its input on the next call, so errors telescope along the chain.
#pragma once

#include "../detail/fp_ops.cuh"
#include "../dtype.cuh"

#include <type_traits>

namespace echo::comp {

/// Per element of its input, a rank owns exactly one error:
///  - for a segment it sends: e = x' - D(Q(x'));
///  - for its own segment:    e = S - out, the error of quantizing the sum (and of rounding it to
///                            the output type).
/// Summed over ranks that is exactly what the call lost, and the next call adds it back.
/// Storage is float (exact) or bfloat16_t / half_t (half the state traffic; the stored error is
/// rounded to nearest even).
template <class Storage = float>
struct error_feedback {
  static_assert(std::is_same<Storage, float>::value || std::is_same<Storage, bfloat16_t>::value ||
                    std::is_same<Storage, half_t>::value,
                "echo::comp::error_feedback: Storage must be float, echo::bfloat16_t or echo::half_t");
  static constexpr const char* name = "error_feedback";
  static constexpr bool enabled = true;
  using storage = Storage;

  /// What is stored for an error e: e itself, or 0 where e is NaN or Inf (a group that held a
  /// NaN or Inf, or a sum that overflowed). The bad call's output already shows it; storing it
  /// would poison that group on every later call of the chain, where NCCL's sum forgets it.
  ECHO_HD static float keep(float e) { return echo::detail::is_finite(e) ? e : 0.0f; }
};

}  // namespace echo::comp
