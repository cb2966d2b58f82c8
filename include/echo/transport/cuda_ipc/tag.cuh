// transport::cuda_ipc: single-node peer-to-peer over NVLink / PCIe through mapped memory (engine.cuh).
// The tag an echo::all_reduce names its transport with: echo::all_reduce<Q, transport::cuda_ipc::tag>.
#pragma once

#include "engine.cuh"

namespace echo::transport::cuda_ipc {

struct tag {
  static constexpr const char* name = cuda_ipc::name;
  template <class Config>
  using engine = cuda_ipc::engine<Config>;
};

}  // namespace echo::transport::cuda_ipc
