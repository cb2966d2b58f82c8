// comp::error_feedback<Storage>: each rank keeps the error it injected on the last call of a
// chain and adds it to its input on the next call, so errors telescope along the chain.
#pragma once

#include "../detail/fp_ops.cuh"
#include "../quant/clipped.cuh"
#include "compensator.cuh"
#include "state_storage.cuh"

#include <type_traits>

namespace echo::comp {

/// The compensator contract is in comp/compensator.cuh. Per element of its input, a rank owns
/// exactly one error:
///  - for a segment it sends: e = x' - D(Q(x'));
///  - for its own segment:    e = S - out, the error of quantizing the sum (and of rounding it to
///                            the output type).
/// Storage: step8_state (the default): the error as 8-bit codes in units of the step of the data
/// group that made it, 1 + 1/16 bytes a value; on H200 as fast as bf16 at 1 GiB and 1-4 % faster
/// from 16 to 256 MiB, in half the memory, and as flat along depth (docs/tuning.md,
/// docs/quality.md). step4_state: half the bytes, but it loses 1/8 of each
/// error per call. (Both fit a step of their own where a call has no data step on a grid that
/// holds zero: quant::none, naive_zero_point.) bfloat16_t / half_t: the error rounded (2 bytes);
/// float: kept exactly (4).
/// int8_state / int4_state: codes with their own fitted step per 32 values (more instructions).
template <class Storage = step8_state>
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

/// Whether Comp keeps every error quantizer Q makes. step8_state / step4_state code an error in
/// units of the data step and hold +-0.99 / +-0.875 steps: a clipped quantizer's clamped values
/// err by more (quant::clipped), so a clip needs int8_state, int4_state or an element storage.
template <class Comp, class Q>
struct holds_errors_of : std::true_type {};
template <class Storage, class Q>
struct holds_errors_of<error_feedback<Storage>, Q>
    : std::bool_constant<!state_storage<Storage>::data_step || quant::clip_of<Q>::ratio_1024 == 1024> {};

}  // namespace echo::comp
