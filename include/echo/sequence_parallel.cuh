// echo::sequence_parallel<Quant, Transport, Comp, Policy>: an echo::all_reduce object that also
// serves the sequence-parallel pair, reduce_scatter and all_gather (design.md, "The
// sequence-parallel pair"). Its kernels for the pair are built and loaded with it; a plain
// echo::all_reduce builds only the all-reduce's.
#pragma once

#include "all_reduce.cuh"

namespace echo {

template <class Quant, class Transport = transport::cuda_ipc::tag, class Comp = comp::none,
          class Policy = tuning::default_policy>
using sequence_parallel = all_reduce<Quant, Transport, Comp, Policy, collective::with_sequence_parallel>;

}  // namespace echo
