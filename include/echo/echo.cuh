// Echo: error-compensated low-bit all-reduce. Umbrella header.
//
// The host parts (quantizers, compensators, echo::reference) compile with any C++17 compiler;
// the device path (communicator, transports, echo::all_reduce) is included under nvcc.
#pragma once

#include "config.cuh"
#include "dtype.cuh"
#include "error.cuh"

// Every quantizer and compensator the tools compile, with their headers (registry.cuh lists them).
#include "registry.cuh"

#include "quant/closing.cuh"
#include "quant/packet.cuh"
#include "quant/transform.cuh"

#include "comp/compensator.cuh"
#include "comp/state_storage.cuh"

#include "epilogue/residual_rms_norm.cuh"

#include "reference/all_gather.cuh"
#include "reference/all_reduce.cuh"
#include "reference/chain_state.cuh"
#include "reference/reduce_scatter.cuh"
#include "reference/residual_rms_norm.cuh"
#include "reference/segments.cuh"

#if ECHO_HAS_CUDA
#include "device.cuh"
#endif
