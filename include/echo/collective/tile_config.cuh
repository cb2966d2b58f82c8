// tile_config<Q, T, Comp, Policy>: the one configuration type the device stages and kernels are
// templated on: quantizer, element type, compensator and tuning policy, and what follows from them.
#pragma once

#include "../quant/transform.cuh"
#include "tile_codec.cuh"

namespace echo::collective {

#if ECHO_HAS_CUDA

template <class Q, class T, class Comp, class Policy>
struct tile_config {
  using quant = Q;
  using element = T;
  using comp = Comp;
  using policy = Policy;
  using codec = tile_codec<Q, T, Policy::lane_values>;
  static constexpr int V = codec::V;                            ///< values a lane
  static constexpr size_t sub_elems = size_t(32) * V;           ///< values of a warp's sub-tile
  static constexpr size_t sub_bytes = codec::sub_tile_bytes();  ///< bytes of a sub-tile's packet
  static constexpr int threads = Policy::threads;
  static constexpr int warps = Policy::threads / 32;            ///< warps a block
  /// Where the chain's errors of a call through Q are kept (comp::state_header's domain).
  static constexpr unsigned domain = echo::quant::transform_domain<Q>();
};

#endif

}  // namespace echo::collective
