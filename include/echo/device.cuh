// The device path (nvcc only): communicator, transports, chain state and echo::all_reduce.
#pragma once

#include "all_reduce.cuh"
#include "chain.cuh"
#include "communicator.cuh"
#include "defaults.cuh"
#include "dispatch_table.cuh"
#include "options.cuh"
#include "transport/cuda_ipc.cuh"
#include "transport/nccl.cuh"
