// What an echo::all_reduce object hands its transport's engine: the object-level configuration
// (config) and, per call, the call's arguments (call_args).
#pragma once

#include "../epilogue/residual_rms_norm.cuh"
#include "../options.cuh"
#include "../quant/none.cuh"
#include "operation.cuh"

namespace echo::collective {

/// The policies of an echo::all_reduce object. A call runs either Quant or, below the dispatch
/// size, quant::none; the element type is the call's. Ops: what it serves (operation.cuh).
template <class Quant, class Comp, class Policy, class Ops = all_reduce_only>
struct config {
  using quant = Quant;
  using comp = Comp;
  using policy = Policy;
  using ops = Ops;
};

/// One call as the engine sees it (arguments already checked by echo::all_reduce).
template <class T>
struct call_args {
  const T* in;
  T* out;
  size_t n;
  unsigned char* state;  ///< the chain's state memory (comp/compensator.cuh), or null
  state_update mode;
  uint32_t sig;          ///< signature of (n, element type, quantizer, compensator), the same on every rank
  bool capturing = false;  ///< the stream is capturing a CUDA graph (launches take no programmatic attribute)
  /// The call codes with the closing quantizer: a chain's last call (stored errors added, none
  /// kept, the chain left fresh), or the sequence-parallel all-gather (no chain).
  bool closes = false;
  epilogue::job<T> epilogue{};  ///< what follows the all-reduce on out (checked; kind::none: nothing)
  operation op = operation::all_reduce;  ///< n is the whole message's either way
};

}  // namespace echo::collective
