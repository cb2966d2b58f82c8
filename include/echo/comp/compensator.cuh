// The compensator contract, and the layout of a chain's state memory.
//
// A compensator C decides what a rank adds to its input on entry and what it keeps of the error a
// call injects. Every compensator is a type with:
//   C::name          a string
//   C::keeps_state   false: no state, no chain argument (comp::none)
// and, when it keeps state,
//   C::storage               the state storage policy (comp/state_storage.cuh)
//   C::state_bytes(n)        bytes of state memory a chain of n elements needs
//   C::keep(e)               what is stored for an error e (host and device, bit-identical);
//                            e itself for every finite e (the pipeline skips it for errors it
//                            knows are finite)
// The pipeline (collective/tile_stages.cuh) applies it the same way for every compensator:
//   entry:  x' = x + c, c the stored error of this element (0 in a fresh chain);
//   exit:   every element of a rank's input gets exactly one stored error per call: for a
//           segment it sends, e = x' - D(Q(x')); for its own segment, e = S - out (the error of
//           quantizing the sum and rounding it to the element type). Summed over ranks that is
//           exactly what the call lost, and the next call adds it back, so along a chain the error
//           telescopes to one call's.
// echo::reference implements the same contract on the host; the two agree bit for bit.
//
// State memory of a chain of capacity N: [ header (256 B) | storage of N values ]. The header's
// tag says what the storage holds (the n, and the domain, of the call that wrote it), so that all-zero memory is a fresh chain (a caller resets a
// chain it owns with a memset, e.g. torch's `state.zero_()`), and so that the device itself,
// not the host, decides whether a call starts a fresh chain: a call captured in a CUDA graph then
// behaves on every replay exactly as the same call made directly.
#pragma once

#include "../config.cuh"

namespace echo::comp {

/// The first bytes of a chain's state memory.
struct state_header {
  /// What the stored errors belong to. Bits 0-55: n of the last call that kept errors (0: a fresh
  /// chain); bits 58-60: the domain they are kept in (0: the input's own; a quantizer with a
  /// group transform keeps them in its transformed domain, quant::transform_domain). A call
  /// continues the chain only when both match (a call in another domain starts it fresh). Bit 63:
  /// that call was deferred and its update() has not run; bits 56-57 then hold its element type
  /// (echo::dtype), so an update() of another n or type finds nothing due. Bit 62: that deferred
  /// call started a fresh chain.
  uint64_t tag;
  uint32_t done;  ///< blocks of the current deferred update that finished (its last block writes tag)

  static constexpr size_t bytes = 256;  // keeps the storage 256-byte aligned
  static constexpr uint64_t pending = uint64_t(1) << 63;
  static constexpr uint64_t fresh = uint64_t(1) << 62;
  static constexpr int type_shift = 56;
  static constexpr int domain_shift = 58;
  static constexpr uint64_t max_n = (uint64_t(1) << type_shift) - 1;

  /// The tag of a completed call on n elements whose errors are kept in `domain`.
  ECHO_HD static constexpr uint64_t key(uint64_t n, unsigned domain) {
    return n | static_cast<uint64_t>(domain) << domain_shift;
  }
  /// Whether a call with this key continues the chain (else it starts from zero errors). A
  /// chain whose deferred update never ran is not continued: its state is half old.
  ECHO_HD static bool continues(uint64_t tag, uint64_t key) { return tag == key; }
  /// The tag after a deferred call (key, element type `type`): its update() is due.
  ECHO_HD static uint64_t after_deferred(uint64_t key, unsigned type, bool continued) {
    return key | static_cast<uint64_t>(type) << type_shift | pending | (continued ? 0 : fresh);
  }
  /// Whether update() on (key, type) may run, and whether the deferred call it completes continued the chain.
  ECHO_HD static bool update_due(uint64_t tag, uint64_t key, unsigned type) {
    return (tag & ~fresh) == (key | static_cast<uint64_t>(type) << type_shift | pending);
  }
  ECHO_HD static bool update_continues(uint64_t tag) { return (tag & fresh) == 0; }
};

}  // namespace echo::comp
