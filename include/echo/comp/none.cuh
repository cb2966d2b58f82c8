// comp::none: no error compensation; every call's rounding error stays in the result.
#pragma once

namespace echo::comp {

struct none {
  static constexpr const char* name = "none";
  static constexpr bool enabled = false;
  using storage = float;
};

}  // namespace echo::comp
