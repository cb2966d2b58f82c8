// Tuning knobs of the device pipeline. None of them changes a result bit: tiles and blocks only
// decide who computes what, never how groups, segments or summation order are defined.
#pragma once

#include "../config.cuh"

#include <type_traits>

namespace echo::tuning {

/// What a call asks of the pipeline, which picks its wide and mid policies (wide_policy_t,
/// mid_policy_t) and, in the dispatch table, the size from which it runs wide:
///   heavy     codes above 4 bits (whose codec takes 16 values a lane), or the 16-bit pipeline
///             with error-feedback state: more operands in registers; it wants more warps;
///   lean      4 bits or fewer without state: gains more from 32 values a lane at fewer warps;
///   plain     the 16-bit pipeline without state: bound by the link, little arithmetic; from
///             64 MiB fewer warps win (docs/tuning.md);
///   stateful  4 bits or fewer with error-feedback state: the codec of a lean call, the operands
///             of a heavy one. Its own weight because its best tiers differ from both: on
///             2 x H200 the mid policy beats the wide one up to 1 GiB, where for 8-bit the wide
///             one wins from 256 MiB (docs/tuning.md).
enum class call_weight { lean, heavy, plain, stateful };

/// Policies chosen by the call (Plain defaults to Lean, Stateful to Heavy): a pipeline_policy's
/// wide or mid variant.
template <class Lean, class Heavy, class Plain = Lean, class Stateful = Heavy>
struct wide_by_call {
  template <call_weight K>
  using select = std::conditional_t<
      K == call_weight::heavy, Heavy,
      std::conditional_t<K == call_weight::plain, Plain, std::conditional_t<K == call_weight::stateful, Stateful, Lean>>>;
};

namespace detail {
template <class Wide, class Self>
struct wide_of {  // one wide policy for every call (void: the policy itself)
  template <call_weight>
  using select = std::conditional_t<std::is_void<Wide>::value, Self, Wide>;
};
template <class Lean, class Heavy, class Plain, class Stateful, class Self>
struct wide_of<wide_by_call<Lean, Heavy, Plain, Stateful>, Self> : wide_by_call<Lean, Heavy, Plain, Stateful> {};

template <class P>
constexpr bool is_leaf_policy();  // names no wide or mid variant of its own (below)

template <class Q, class Comp>
constexpr call_weight weight_of() {
  if constexpr (Q::quantizes)
    return Q::bits > 4 ? call_weight::heavy : Comp::keeps_state ? call_weight::stateful : call_weight::lean;
  else return Comp::keeps_state ? call_weight::heavy : call_weight::plain;
}
}  // namespace detail

template <int Threads = 256, int BlocksPerSm = 2, int FlagElems = 4096, int LaneValues = 16, int StageLag = 0,
          class Wide = void, int Prefetch = 0, class Mid = void>
struct pipeline_policy {
  static_assert(LaneValues == 16 || LaneValues == 32, "pipeline_policy: LaneValues must be 16 or 32");
  static_assert(StageLag >= 0 && StageLag <= 4, "pipeline_policy: StageLag must be in [0, 4]");
  static_assert(FlagElems >= 32, "pipeline_policy: FlagElems >= 32");
  static_assert(Prefetch >= 0 && Prefetch <= 4, "pipeline_policy: Prefetch must be in [0, 4]");
  static_assert(Threads % 32 == 0 && Threads >= 64 && Threads <= 1024, "pipeline_policy: Threads must be a multiple of 32 in [64, 1024]");
  static_assert(BlocksPerSm >= 1 && Threads * BlocksPerSm <= 2048, "pipeline_policy: at most 2048 threads per SM");
  static constexpr int threads = Threads;
  /// Resident blocks per SM the kernels are compiled for (__launch_bounds__ minimum, which caps
  /// registers at 65536 / (Threads * BlocksPerSm)) and the most the grid uses.
  static constexpr int blocks_per_sm = BlocksPerSm;
  /// The most values one ready flag covers in the cuda_ipc kernel (whole warp sub-tiles): larger
  /// amortises the flag's system-scope fence; small messages use fewer so every warp has work.
  static constexpr int flag_elems = FlagElems;
  /// Values a lane quantizes at once (tile_codec): 32 halves the per-lane share of a group's fit
  /// and doubles the bytes in flight per load, at the cost of registers.
  static constexpr int lane_values = LaneValues;
  /// The schedule of the cuda_ipc kernel. 0: every warp pushes all its tiles, then reduces, then
  /// gathers, one launch per round of the rings (a message larger than the rings takes several).
  /// L >= 1: one launch for any n, the stages of different tiles overlapped in every warp, L
  /// iterations between a tile's push and its reduce and between its reduce and gather (the
  /// flow-control rule then asks R >= (2 L + 1) W). docs/benchmarks.md measures both.
  static constexpr int stage_lag = StageLag;
  /// Sub-tiles ahead whose input (x and stored errors) a warp asks L2 to fetch while it works on
  /// the current one (detail::prefetch_l2; 0: none). The loads then wait on L2, not on HBM, with
  /// no operand registers held across sub-tiles.
  static constexpr int prefetch = Prefetch;
  /// The policy a cuda_ipc call runs under from the dispatch table's wide_from size on
  /// (all_reduce_options::wide_policy_from_bytes overrides it), for a call of weight K
  /// (wide_policy_t): this policy itself when Wide is void, else Wide, or the one a
  /// wide_by_call names for K. A wide policy must stream in one launch (stage_lag >= 1) and name
  /// no wide or mid policy of its own. Large messages gain from more warps or values in flight even
  /// where the register cap makes them spill; small ones lose (docs/benchmarks.md).
  template <call_weight K>
  using wide_for = typename detail::wide_of<Wide, pipeline_policy>::template select<K>;
  /// The policy a quantized cuda_ipc call runs under between the dispatch table's mid_from size
  /// and its wide size (all_reduce_options::mid_policy_from_bytes overrides it), for a call of
  /// weight K (mid_policy_t): this policy itself when Mid is void, else Mid, or the one a
  /// wide_by_call names for K. A mid policy names no wide or mid policy of its own. Its reason:
  /// from a few tens of MiB the phase schedule gains from 32 values a lane and larger flags, which
  /// cost the smallest pipelined messages (docs/tuning.md).
  template <call_weight K>
  using mid_for = typename detail::wide_of<Mid, pipeline_policy>::template select<K>;

 private:
  template <class W>
  static constexpr bool valid_wide() {
    return std::is_same<W, pipeline_policy>::value || (W::stage_lag >= 1 && detail::is_leaf_policy<W>());
  }
  static_assert(valid_wide<wide_for<call_weight::lean>>() && valid_wide<wide_for<call_weight::heavy>>() &&
                    valid_wide<wide_for<call_weight::plain>>() && valid_wide<wide_for<call_weight::stateful>>(),
                "pipeline_policy: a wide policy must have stage_lag >= 1 and no wide or mid policy of its own");
  template <class M>
  static constexpr bool valid_mid() {
    return std::is_same<M, pipeline_policy>::value || detail::is_leaf_policy<M>();
  }
  static_assert(valid_mid<mid_for<call_weight::lean>>() && valid_mid<mid_for<call_weight::heavy>>() &&
                    valid_mid<mid_for<call_weight::plain>>() && valid_mid<mid_for<call_weight::stateful>>(),
                "pipeline_policy: a mid policy must name no wide or mid policy of its own");
};

namespace detail {
template <class P>
constexpr bool is_leaf_policy() {
  using K = call_weight;
  return std::is_same<typename P::template wide_for<K::lean>, P>::value &&
         std::is_same<typename P::template wide_for<K::heavy>, P>::value &&
         std::is_same<typename P::template wide_for<K::plain>, P>::value &&
         std::is_same<typename P::template wide_for<K::stateful>, P>::value &&
         std::is_same<typename P::template mid_for<K::lean>, P>::value &&
         std::is_same<typename P::template mid_for<K::heavy>, P>::value &&
         std::is_same<typename P::template mid_for<K::plain>, P>::value &&
         std::is_same<typename P::template mid_for<K::stateful>, P>::value;
}
}  // namespace detail

/// The wide policy of Policy for a call through quantizer Q (or quant::none) with compensator Comp.
template <class Policy, class Q, class Comp>
using wide_policy_t = typename Policy::template wide_for<detail::weight_of<Q, Comp>()>;
/// The mid policy of Policy for a quantized call through Q with compensator Comp.
template <class Policy, class Q, class Comp>
using mid_policy_t = typename Policy::template mid_for<detail::weight_of<Q, Comp>()>;

/// The default policy's variants, each a name with its reason (measurements: docs/tuning.md;
/// on 2 x H200 unless said).
/// Mid (the phase schedule at 32 values a lane), from the dispatch table's mid size on:
///   4 bits or fewer without state: 16384 values a flag (4-bit: 64 MiB 105 -> 85 us, 128 MiB 188 -> 155 us).
using mid_lean = pipeline_policy<256, 2, 16384, 32, 0>;
///   heavy and stateful calls: 8192 values a flag (4-bit + EF: 64 MiB 118 -> 94 us; 8-bit, whose
///   codec takes 16 values a lane, unchanged).
using mid_heavy = pipeline_policy<256, 2, 8192, 32, 0>;
/// Wide (the stages overlapped), from the call's wide size on:
///   lean: 2 blocks a SM, 32 values a lane, 16384 values a flag (4-bit 1 GiB: 2.93x -> 3.07x NCCL),
///   asking L2 for its input one sub-tile ahead (4-bit 1 GiB: 1062 -> 1035 us). ptxas spills one
///   8-byte value (8 / 24 B), outside the per-value work; the stores keep their widths.
using wide_lean = pipeline_policy<256, 2, 16384, 32, 1, void, 1>;
///   heavy (and stateful, where the table sends them wide; on 2 x H200 never): 3 blocks a SM,
///   8192 values a flag, one sub-tile ahead in L2 (2-3 % from 256 MiB). Its 80 registers spill
///   20 / 36 B (8-bit); 2 blocks of 320 threads do not, and were 4-7 % slower from 256 MiB (one
///   GPU): warps in flight beat the spills. Stateful calls under wide_lean ran 2.2x slower once
///   the codec gained its clamp-free path (ptxas split their 16-byte stores into 4-byte ones).
using wide_heavy = pipeline_policy<256, 3, 8192, 16, 1, void, 1>;
///   plain (the 16-bit pipeline): 1 block a SM of 8 warps, 8192 values a flag (16-bit 256 MiB:
///   0.96x -> 1.08x NCCL).
using wide_plain = pipeline_policy<256, 1, 8192, 16, 1>;

/// 256 threads, 2 blocks a SM, 4096 values a flag, 16 values a lane, the phase schedule, with
/// the variants above.
using default_policy =
    pipeline_policy<256, 2, 4096, 16, 0, wide_by_call<wide_lean, wide_heavy, wide_plain>, 0, wide_by_call<mid_lean, mid_heavy>>;

}  // namespace echo::tuning
