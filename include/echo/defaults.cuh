// The configuration Echo recommends for 4-bit calls (docs/quality.md has the measurements behind it).
#pragma once

#include "all_reduce.cuh"
#include "comp/error_feedback.cuh"
#include "quant/clipped.cuh"
#include "quant/rotated.cuh"
#include "quant/zero_aware.cuh"

namespace echo {

/// 4-bit codes of Hadamard-rotated groups of 128, each group's range clipped to 870 / 1024 of
/// itself (4.25 bits a value on the wire). Rotation spreads a group's outlier channels over the
/// group, the clip spends the steps on the bulk; the call that closes a chain (close_chain) sends
/// the same rotated groups at 8 bits.
using default_quantizer = quant::rotated<quant::clipped<quant::zero_aware<4, 128>, 870>>;
/// Error feedback with the error kept as 8-bit codes on a step fitted to each 32 errors: a clip's
/// errors reach beyond the half step that comp::step8_state holds.
using default_compensator = comp::error_feedback<comp::int8_state>;
template <class Transport = transport::cuda_ipc::tag>
using default_all_reduce = all_reduce<default_quantizer, Transport, default_compensator>;

}  // namespace echo
