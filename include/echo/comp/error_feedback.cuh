// comp::error_feedback<Storage>: each rank keeps the error it injected on the last call of a
// chain and adds it to its input on the next call, so errors telescope along the chain.
#pragma once

#include "../detail/fp_ops.cuh"
#include "compensator.cuh"
#include "state_storage.cuh"

#include <type_traits>

namespace echo::comp {

/// The compensator contract is in comp/compensator.cuh. Per element of its input, a rank owns
/// exactly one error:
///  - for a segment it sends: e = x' - D(Q(x'));
///  - for its own segment:    e = S - out, the error of quantizing the sum (and of rounding it to
///                            the output type).
/// Storage: the error rounded to bfloat16_t (the default: 2 bytes a value, the fastest measured on
/// H200), half_t, or kept exactly as float (4 bytes); or int8_state / int4_state: 1 + 1/16 or
/// 1/2 + 1/16 bytes a value, codes with their own step per 32 values, cheaper in memory traffic
/// but dearer in instructions (docs/benchmarks.md: slower on H200 today); or step8_state /
/// step4_state: the same bytes, in units of the data group's step (no fit of its own).
/// docs/depth-experiment.md measures what each keeps of the error.
template <class Storage = bfloat16_t>
struct error_feedback {
  static_assert(std::is_same<Storage, float>::value || std::is_same<Storage, bfloat16_t>::value ||
                    std::is_same<Storage, half_t>::value || std::is_same<Storage, int8_state>::value ||
                    std::is_same<Storage, int4_state>::value || std::is_same<Storage, step8_state>::value ||
                    std::is_same<Storage, step4_state>::value,
                "echo::comp::error_feedback: Storage must be float, echo::bfloat16_t, echo::half_t, "
                "echo::comp::int8_state, int4_state, step8_state or step4_state");
  static constexpr const char* name = "error_feedback";
  static constexpr bool keeps_state = true;
  using storage = Storage;

  static size_t state_bytes(size_t n) { return state_header::bytes + state_storage<Storage>::bytes(n); }

  /// What is stored for an error e: e itself, or 0 where e is NaN or Inf (a group that held a
  /// NaN or Inf, or a sum that overflowed). The bad call's output already shows it; storing it
  /// would poison that group on every later call of the chain, where NCCL's sum forgets it.
  ECHO_HD static float keep(float e) { return echo::detail::is_finite(e) ? e : 0.0f; }
};

}  // namespace echo::comp
