// Checks over many elements: report the first few failures in detail, then only count.
#pragma once

#include <doctest/doctest.h>

#include <cstddef>

namespace echo_test {

/// Counts failures of a many-element check; the first `shown` are reported through doctest.
struct failure_counter {
  size_t failures = 0;
  size_t shown = 5;
  bool report() { return ++failures <= shown; }
};

}  // namespace echo_test

/// If `cond` is false: count it, and for the first few failures emit a failing check with the
/// message `msg` (a doctest stream expression such as "x = " << x).
#define ECHO_EXPECT(counter, cond, msg) \
  do {                                    \
    if (!(cond) && (counter).report()) {  \
      INFO(msg);                          \
      FAIL_CHECK("failed: " #cond);       \
    }                                     \
  } while (0)
