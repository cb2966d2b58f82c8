// A band of message sizes in bytes, [from, to), and the size a tier is never taken from.
#pragma once

#include <cstddef>
#include <cstdint>

namespace echo::tuning {

/// The size a tier is never taken from.
inline constexpr size_t never = SIZE_MAX;

/// Sizes from `from` up to, not including, `to`; {never, never} holds none.
struct size_band {
  size_t from = never;
  size_t to = never;
  constexpr bool holds(size_t bytes) const { return from <= bytes && bytes < to; }
};

}  // namespace echo::tuning
