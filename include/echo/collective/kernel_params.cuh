// Plain-data arguments of one launch of the Echo pipeline (one round of one call).
#pragma once

#include "../communicator.cuh"
#include "workspace_layout.cuh"

namespace echo::collective {

template <class T, class S>
struct kernel_params {
  const T* in;
  T* out;
  S* state;                  ///< compensation state (n values), or null
  bool fuse_send_state;      ///< false: the send errors are left to a deferred update launch
  size_t n;
  size_t granule;            ///< partition granule (quantization group)
  int rank;
  int ranks;
  size_t round_offset;       ///< where this round starts inside every segment (elements)
  size_t round_len;          ///< elements of a segment handled per round
  int subtiles;              ///< warp sub-tiles one flag covers (layout.tile_bytes / sub-tile bytes)
  workspace_layout layout;
  unsigned char* local;                         ///< this rank's workspace
  unsigned char* const* peer;  ///< device array: every rank's workspace, as this device sees it
  uint64_t spin_limit_ns;
  int* status;               ///< host-mapped; set to status::timeout by a block that gives up

  ECHO_HOST_DEVICE uint32_t* sync() const { return reinterpret_cast<uint32_t*>(local); }
};

}  // namespace echo::collective
