// The layout of a rank's cuda_ipc workspace. It is fixed at construction, from (P, max_elements,
// the ring size) alone, identically on every rank, so that every address keeps one role for the
// object's life: a flag word is only ever a flag word, a data slot only ever data.
//
// Why: when regions were placed per call (their offsets following the call's tile count), a flag
// address of one call could hold packet bytes of an earlier call with another layout, and about
// half of those bytes read as a reached epoch: the reader then consumed a slot nobody had written
// (docs/fault-matrix.md, "stale flags"). With fixed regions a flag holds only flag values, whose
// epochs never repeat (flag.cuh), and data slots are reused only under the flow control of
// the pipeline (pipeline_kernel.cuh).
#pragma once

#include "../../config.cuh"
#include "flag.cuh"

namespace echo::transport::cuda_ipc {

///  [ sync words (256 B)                          ]  sync_words
///  [ recv flags:   P x flag_tiles flags (16 B)   ]  recv_flag(i, t): sender i pushed tile t of my segment
///  [ gather flags: P x flag_tiles flags (16 B)   ]  gather_flag(j, t): owner j pushed its reduced tile t
///  [ one-shot:     2 halves x P x oneshot_bytes  ]  (its flags are recv_flag(i, block))
///  [ recv ring:    P x ring_bytes                ]  tile t of sender i at slot t mod R
///  [ gather ring:  P x ring_bytes                ]  tile t of owner j at slot t mod R
struct workspace_layout {
  int ranks = 0;
  size_t flag_tiles = 0;    ///< most tiles a segment can have (at max_elements, the finest tiles)
  size_t oneshot_bytes = 0; ///< largest one-shot message (0: no one-shot region)
  size_t ring_bytes = 0;    ///< bytes of one peer's ring (recv and gather rings alike)

  static constexpr size_t flag = flag_words::bytes;

  ECHO_HD static constexpr size_t align(size_t b) { return (b + 255) & ~size_t(255); }

  ECHO_HD size_t recv_flags() const { return sync_words::bytes; }
  ECHO_HD size_t gather_flags() const { return recv_flags() + align(static_cast<size_t>(ranks) * flag_tiles * flag); }
  ECHO_HD size_t oneshot() const { return gather_flags() + align(static_cast<size_t>(ranks) * flag_tiles * flag); }
  ECHO_HD size_t recv_ring() const { return oneshot() + 2 * static_cast<size_t>(ranks) * align(oneshot_bytes); }
  ECHO_HD size_t gather_ring() const { return recv_ring() + static_cast<size_t>(ranks) * align(ring_bytes); }
  ECHO_HD size_t total() const { return gather_ring() + static_cast<size_t>(ranks) * align(ring_bytes); }

  ECHO_HD size_t recv_flag(int sender, size_t tile) const { return recv_flags() + (sender * flag_tiles + tile) * flag; }
  ECHO_HD size_t gather_flag(int owner, size_t tile) const { return gather_flags() + (owner * flag_tiles + tile) * flag; }
  ECHO_HD size_t oneshot_slot(uint64_t epoch, int sender) const {
    return oneshot() + ((epoch & 1u) * static_cast<size_t>(ranks) + sender) * align(oneshot_bytes);
  }
  /// Bytes from one rank's ring to the next: recv_slot(i, s, b) = recv_slot(0, s, b) + i * ring_stride().
  ECHO_HD size_t ring_stride() const { return align(ring_bytes); }
  /// Slot `slot` (of tile_bytes each) of sender i's ring / owner j's ring.
  ECHO_HD size_t recv_slot(int sender, size_t slot, size_t tile_bytes) const {
    return recv_ring() + sender * ring_stride() + slot * tile_bytes;
  }
  ECHO_HD size_t gather_slot(int owner, size_t slot, size_t tile_bytes) const {
    return gather_ring() + owner * ring_stride() + slot * tile_bytes;
  }
};

}  // namespace echo::transport::cuda_ipc
