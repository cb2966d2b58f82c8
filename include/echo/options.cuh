// Options of an echo::all_reduce object and of its calls.
#pragma once

#include "config.cuh"
#include "tuning/size_band.cuh"

#include <cstddef>
#include <optional>

namespace echo {

/// fused: the call writes every stored error. deferred: it writes only the errors of the rank's
/// own segment; the caller then runs update() (e.g. on a side stream beside the next GEMM) before
/// the next call of the chain. Both give identical state.
enum class state_update { fused, deferred };

struct all_reduce_options {
  /// A cap on the data buffers. cuda_ipc: its rings take what a message of max_elements needs
  /// (its segment's packets at fp32, for every peer, twice) up to this cap; a larger message
  /// under a cap below that wraps around the rings under flow control (or takes several rounds).
  /// The fixed parts (flags: 16 bytes per 2048 values of max_elements a peer, twice; the one-shot
  /// halves: up to 2 MiB a peer) come on top. transport::nccl: the same for its chunk buffers.
  /// 256 MiB: from 256 MiB messages up, rings of 256 MiB ran faster than of 64 MiB.
  size_t workspace_bytes = size_t(256) << 20;
  /// A peer missing longer than this makes the call fail with status::timeout. Must be > 0.
  double spin_limit_seconds = 10.0;
  /// Below this many bytes a call is not quantized (the transport's best unquantized all-reduce);
  /// unset: from echo::tuning::dispatch_table for this GPU, P and transport.
  std::optional<size_t> unquantized_below_bytes;
  /// cuda_ipc: from this many bytes on a call (quantized or not) runs under the policy's wide
  /// variant (pipeline_policy::wide_for; nothing changes where the policy names none); unset: from
  /// echo::tuning::dispatch_table for this GPU and P (tuning::never: not at all). Results are
  /// bit-identical either way.
  std::optional<size_t> wide_policy_from_bytes;
  /// Refuse pointers the device cannot address as its own memory (pageable host memory, another
  /// GPU's memory) with status::invalid_argument. Costs a cudaPointerGetAttributes per new pointer.
  bool check_pointers = true;
  /// cuda_ipc: from this many bytes on a quantized call below the wide size runs under the
  /// policy's mid variant (pipeline_policy::mid_for); unset: from echo::tuning::dispatch_table.
  /// Below it a quantized call goes wide from the table's wide_from, as under a policy without a
  /// mid variant (so tuning::never switches the mid tier off, and no call weight is left narrow at
  /// every size). Results are bit-identical either way.
  std::optional<size_t> mid_policy_from_bytes;
  /// cuda_ipc: the sizes at which a call with an epilogue (epilogue/residual_rms_norm.cuh) runs the
  /// rows' normalisation in the all-reduce's last launch; at every other size as a launch of its
  /// own on the whole GPU right after it. Unset: from echo::tuning::dispatch_table. Rank-local:
  /// results are bit-identical either way, and ranks may differ.
  std::optional<tuning::size_band> epilogue_in_launch_bytes;
};

}  // namespace echo
