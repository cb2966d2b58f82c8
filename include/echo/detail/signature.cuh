// A 32-bit fingerprint of what a call (or an object) is: every rank that makes the same call
// computes the same value, and ranks that disagree on n, element type or configuration almost
// surely do not (a 1 in 2^32 chance per mismatched call goes undetected).
#pragma once

#include "../config.cuh"

#include <unistd.h>

namespace echo::detail {

class signature {
 public:
  constexpr signature() = default;
  constexpr signature& add(uint64_t v) {
    h_ = (h_ ^ v) * 0x100000001B3ull;  // FNV-1a over 64-bit words, then a final mix
    return *this;
  }
  signature& add(const char* s) {
    for (; *s; ++s) add(static_cast<uint64_t>(static_cast<unsigned char>(*s)));
    return add(uint64_t(0xFF));
  }
  constexpr uint32_t value() const {
    uint64_t x = h_ ^ (h_ >> 33);
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return static_cast<uint32_t>(x);
  }
  constexpr uint64_t wide() const { return h_; }

 private:
  uint64_t h_ = 0xcbf29ce484222325ull;
};

/// Which machine this is: a fingerprint of the host name (transports compare them across ranks).
inline uint64_t host_fingerprint() {
  char name[256] = {};
  (void)gethostname(name, sizeof name - 1);
  return signature().add(static_cast<const char*>(name)).wide();
}

}  // namespace echo::detail
