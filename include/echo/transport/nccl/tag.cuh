// transport::nccl: the Echo pipeline over ncclSend / ncclRecv, for any P and any number of nodes
// (engine.cuh). The tag an echo::all_reduce names it with: echo::all_reduce<Q, transport::nccl::tag>.
#pragma once

#include "engine.cuh"

namespace echo::transport::nccl {

struct tag {
  static constexpr const char* name = nccl::name;
  template <class Config>
  using engine = nccl::engine<Config>;
};

}  // namespace echo::transport::nccl
