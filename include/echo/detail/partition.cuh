// How a message of n elements is cut into P owned segments. Shared by the reference and the
// device so that both put the unquantized term and the error state on the same rank.
#pragma once

#include "../config.cuh"
#include "ceil_div.cuh"

namespace echo::detail {

/// A partition with its quotients computed once, so that asking for a segment costs no division
/// (the device kernels ask for segments once a tile).
struct partition_quotients {
  size_t n, granule, base, rem;  ///< granules G: segment j has base + (j < rem) of them
  ECHO_HOST_DEVICE partition_quotients(size_t n_, size_t granule_, int ranks)
      : n(n_), granule(granule_), base(ceil_div(n_, granule_) / ranks), rem(ceil_div(n_, granule_) % ranks) {}
  ECHO_HOST_DEVICE size_t granule_begin(int j) const {
    const size_t jj = static_cast<size_t>(j);
    return jj * base + (jj < rem ? jj : rem);
  }
  ECHO_HOST_DEVICE size_t begin(int j) const {
    const size_t e = granule_begin(j) * granule;
    return e < n ? e : n;
  }
  ECHO_HOST_DEVICE size_t end(int j) const { return begin(j + 1); }
  ECHO_HOST_DEVICE size_t size(int j) const { return end(j) - begin(j); }
};

/// Segments are whole granules (a granule is one quantization group, or 256 elements for the
/// unquantized path, quant::none) dealt out as evenly as possible: the first (granules % P) segments get one
/// extra. Only the last granule of the message may be short.
struct partition {
  size_t n;
  size_t granule;
  int ranks;

  ECHO_HOST_DEVICE size_t granules() const { return ceil_div(n, granule); }
  ECHO_HOST_DEVICE partition_quotients quotients() const { return {n, granule, ranks}; }
  ECHO_HOST_DEVICE size_t granule_begin(int j) const { return quotients().granule_begin(j); }
  ECHO_HOST_DEVICE size_t begin(int j) const { return quotients().begin(j); }
  ECHO_HOST_DEVICE size_t end(int j) const { return begin(j + 1); }
  ECHO_HOST_DEVICE size_t size(int j) const { return end(j) - begin(j); }
};

template <class Q>
constexpr size_t granule_of() {
  if constexpr (!Q::quantizes) return 256;
  else return static_cast<size_t>(Q::group);
}

}  // namespace echo::detail
