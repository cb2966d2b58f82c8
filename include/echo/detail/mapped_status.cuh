// A status word in host-mapped memory: device code writes why a launch gave up, the host reads it
// without a synchronising copy.
#pragma once

#include "cuda_check.cuh"

namespace echo::detail {

class mapped_status {
 public:
  mapped_status() = default;
  /// A step of its own, not the constructor: an engine's collective constructor runs it where a
  /// failure is held for every rank to see (detail/collective_setup.cuh).
  void allocate() {
    ECHO_CUDA_TRY(cudaHostAlloc(&host_, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable));
    *host_ = 0;
    ECHO_CUDA_TRY(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_), host_, 0));
  }
  mapped_status(const mapped_status&) = delete;
  mapped_status& operator=(const mapped_status&) = delete;
  ~mapped_status() {
    if (host_) (void)cudaFreeHost(host_);
  }
  /// The echo::status code a launch recorded (0: none). Synchronise its stream first to see it.
  int read() const { return host_ ? *static_cast<volatile int*>(host_) : 0; }
  /// The host records a status itself (a failed launch), unless a launch recorded one first.
  void mark(int code) {
    if (host_ && read() == 0) *static_cast<volatile int*>(host_) = code;
  }
  int* device() const { return device_; }

 private:
  int* host_ = nullptr;
  int* device_ = nullptr;
};

}  // namespace echo::detail
