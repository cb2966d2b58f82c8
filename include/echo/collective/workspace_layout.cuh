// The per-call layout of a rank's workspace. Every rank computes the same layout from the same
// (workspace bytes, P, tile geometry), so a rank can address its peers' slots and flags.
#pragma once

#include "../config.cuh"

namespace echo::collective {

///  [ sync: epoch, done, abort (256 B) ]
///  [ recv flags:   P x tiles u32 ]   recv_flag(i, t): sender i has pushed tile t of my segment
///  [ gather flags: P x tiles u32 ]   gather_flag(j, t): owner j has pushed reduced tile t
///  [ recv slots:   P x tiles x tile_bytes ]
///  [ gather slots: P x tiles x tile_bytes ]
struct workspace_layout {
  static constexpr size_t sync_bytes = 256;
  int ranks = 0;
  size_t tile_bytes = 0;
  size_t tiles = 0;  // tiles of one segment per round

  ECHO_HOST_DEVICE static constexpr size_t align(size_t b) { return (b + 255) & ~size_t(255); }

  /// The largest layout that fits `bytes` (tiles == 0 if not even one tile fits).
  ECHO_HOST_DEVICE static workspace_layout fit(size_t bytes, int ranks, size_t tile_bytes) {
    workspace_layout l{ranks, tile_bytes, 0};
    const size_t overhead = sync_bytes + 3 * 256;  // alignment slack of the regions
    if (bytes > overhead) l.tiles = (bytes - overhead) / (2 * static_cast<size_t>(ranks) * (tile_bytes + 4));
    return l;
  }
  ECHO_HOST_DEVICE size_t slot_bytes() const { return tiles * tile_bytes; }
  ECHO_HOST_DEVICE size_t recv_flags() const { return sync_bytes; }
  ECHO_HOST_DEVICE size_t gather_flags() const { return recv_flags() + align(ranks * tiles * 4); }
  ECHO_HOST_DEVICE size_t recv_slots() const { return gather_flags() + align(ranks * tiles * 4); }
  ECHO_HOST_DEVICE size_t gather_slots() const { return recv_slots() + ranks * slot_bytes(); }
  ECHO_HOST_DEVICE size_t total() const { return gather_slots() + ranks * slot_bytes(); }

  ECHO_HOST_DEVICE size_t recv_flag(int sender, size_t tile) const { return recv_flags() + (sender * tiles + tile) * 4; }
  ECHO_HOST_DEVICE size_t gather_flag(int owner, size_t tile) const { return gather_flags() + (owner * tiles + tile) * 4; }
  ECHO_HOST_DEVICE size_t recv_slot(int sender, size_t tile) const { return recv_slots() + sender * slot_bytes() + tile * tile_bytes; }
  ECHO_HOST_DEVICE size_t gather_slot(int owner, size_t tile) const { return gather_slots() + owner * slot_bytes() + tile * tile_bytes; }
};

}  // namespace echo::collective
