// The device path (nvcc only): communicator, transports, chain state and echo::all_reduce.
#pragma once

#include "all_reduce.cuh"
#include "chain.cuh"
#include "communicator.cuh"
#include "defaults.cuh"
#include "options.cuh"
#include "sequence_parallel.cuh"
#include "transport/cuda_ipc/tag.cuh"
#include "transport/nccl/tag.cuh"
#include "tuning/dispatch_table.cuh"
