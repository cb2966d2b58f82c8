// comp::none: no error compensation; every call's rounding error stays in the result.
#pragma once

#include "../config.cuh"

namespace echo::comp {

/// The compensator contract is in comp/compensator.cuh.
struct none {
  static constexpr const char* name = "none";
  static constexpr bool keeps_state = false;
  static constexpr size_t state_bytes(size_t) { return 0; }
};

}  // namespace echo::comp
