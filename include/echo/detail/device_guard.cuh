// Makes a device current for a scope and restores the caller's afterwards: Echo's host calls never
// leave the calling thread on another GPU.
#pragma once

#include <cuda_runtime.h>

namespace echo::detail {

class device_guard {
 public:
  explicit device_guard(int device) {
    if (cudaGetDevice(&prev_) == cudaSuccess && prev_ != device) {
      if (cudaSetDevice(device) != cudaSuccess) prev_ = -1;
    } else {
      prev_ = -1;
    }
  }
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;
  ~device_guard() {
    if (prev_ >= 0) (void)cudaSetDevice(prev_);
  }

 private:
  int prev_ = -1;
};

}  // namespace echo::detail
