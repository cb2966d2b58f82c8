// What a call of an echo::all_reduce object computes over its message of n values. The two halves
// of the all-reduce that sequence-parallel training runs instead of it cut the message into P
// equal segments, contiguous by rank (reference/segments.cuh): they are the all-reduce's segments
// for the same n, so all three run the same pipeline (transport/cuda_ipc/pipeline_kernel.cuh).
#pragma once

#include <cstdint>
#include <type_traits>

namespace echo::collective {

enum class operation : uint8_t {
  all_reduce,      ///< in: n values; out: n values, the sum (reference/all_reduce.cuh)
  reduce_scatter,  ///< in: n values; out: this rank's segment of the sum, n / P values (reference/reduce_scatter.cuh)
  all_gather,      ///< in: this rank's segment, n / P values; out: n values (reference/all_gather.cuh)
};

/// What an object serves (echo::all_reduce's last type argument). Every kernel an object may
/// launch is built and loaded at its construction (detail/preload.cuh), so the pair's kernels
/// are built only for objects that name them (echo::sequence_parallel).
struct all_reduce_only {
  static constexpr bool sequence_parallel = false;
};
struct with_sequence_parallel {
  static constexpr bool sequence_parallel = true;
};

/// Contract of an operation set: a type with `static constexpr bool sequence_parallel`.
template <class S, class = void>
struct is_operation_set : std::false_type {};
template <class S>
struct is_operation_set<S, std::void_t<decltype(S::sequence_parallel)>>
    : std::is_same<std::remove_cv_t<decltype(S::sequence_parallel)>, bool> {};

}  // namespace echo::collective
