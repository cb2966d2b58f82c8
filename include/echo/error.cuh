// Echo's error model: host setup throws echo::error; the hot path returns echo::status.
#pragma once

#include "config.cuh"

#include <stdexcept>
#include <string>

namespace echo {

/// Codes returned by calls on the hot path (launches never throw).
enum class status : int {
  success = 0,
  invalid_argument = 1,   ///< a bad argument or misuse, refused before any launch; last_error() names it
  cuda_error = 2,         ///< a CUDA runtime call failed (cudaGetLastError() was cleared; no sticky error left)
  timeout = 3,            ///< a peer did not arrive within the spin limit (reported by check(), sticky)
  poisoned = 4,           ///< an earlier call timed out or mismatched; the object must be rebuilt
  nccl_error = 5,         ///< an NCCL call failed (transport::nccl)
  mismatch = 6,           ///< ranks made different calls (n, element type) (reported by check(), sticky)
};

inline const char* to_string(status s) {
  switch (s) {
    case status::success: return "success";
    case status::invalid_argument: return "invalid argument";
    case status::cuda_error: return "CUDA error";
    case status::timeout: return "peer timeout (spin limit reached)";
    case status::poisoned: return "object poisoned by an earlier timeout or mismatch";
    case status::nccl_error: return "NCCL error";
    case status::mismatch: return "ranks made different calls (n, element type or configuration)";
  }
  return "unknown status";
}

/// Thrown by host setup code; names the failing call and where it was made.
class error : public std::runtime_error {
 public:
  error(std::string call, std::string what, const char* file, int line)
      : std::runtime_error(call + ": " + what + " (" + file + ":" + std::to_string(line) + ")"),
        call_(std::move(call)) {}
  const std::string& call() const noexcept { return call_; }

 private:
  std::string call_;
};

}  // namespace echo

/// Throw echo::error naming `call` when `cond` is false.
#define ECHO_REQUIRE(cond, call, msg)                                 \
  do {                                                                \
    if (!(cond)) throw ::echo::error((call), (msg), __FILE__, __LINE__); \
  } while (0)
