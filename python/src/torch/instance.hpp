// The torch ops' view of one echo::all_reduce instantiation, with its types erased, and the table
// of compiled instantiations (table.cpp) found by name at run time. Host C++ only: ops.cpp, which
// includes torch, never sees a CUDA kernel; the instantiations live in one generated .cu per
// quantizer (torch_ops.cmake), so a parallel build compiles them side by side.
#pragma once

#include "../common/registry.hpp"

#include <echo/dtype.cuh>
#include <echo/epilogue/residual_rms_norm.cuh>
#include <echo/error.cuh>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace echo_py::torch_ops {

/// Who the ranks are: what echo::communicator needs, with the all-gather over a process group.
struct bootstrap {
  int rank;
  int size;
  int device;
  std::function<void(const void* send, void* recv, size_t bytes)> all_gather;  // collective, blocking
};

struct options {
  size_t max_elements;
  double spin_limit_seconds;
  std::optional<size_t> unquantized_below_bytes;  // unset: from echo's dispatch table
};

class instance {
 public:
  virtual ~instance() = default;
  /// echo::all_reduce::operator(); state/state_bytes: the caller's chain memory (null/0: none).
  /// closes: all_reduce::close (the chain's last call).
  virtual echo::status all_reduce(echo::dtype, const void* in, void* out, size_t n, void* stream, void* state,
                                  size_t state_bytes, bool deferred, bool closes) = 0;
  /// The same with the residual + RMSNorm epilogue (out: the normalised rows; e.residual updated).
  virtual echo::status all_reduce_rms_norm(echo::dtype, const void* in, void* out, size_t n, void* stream, void* state,
                                           size_t state_bytes, bool deferred, bool closes,
                                           const echo::epilogue::residual_rms_norm<void>& e) = 0;
  /// The sequence-parallel reduce-scatter (n values in, this rank's n / P out) and all-gather (m
  /// in, P m out); status::invalid_argument from an object that does not serve them.
  virtual echo::status reduce_scatter(echo::dtype, const void* in, void* out, size_t n, void* stream, void* state,
                                      size_t state_bytes) = 0;
  virtual echo::status all_gather(echo::dtype, const void* in, void* out, size_t m, void* stream) = 0;
  /// The deferred half.
  virtual echo::status update(echo::dtype, const void* in, size_t n, void* stream, void* state, size_t state_bytes) = 0;
  virtual echo::status check() = 0;
  virtual std::string last_error() const = 0;
  /// Bytes of chain state n elements need (0: the compensator keeps none).
  virtual size_t state_bytes(size_t n) const = 0;
  virtual size_t unquantized_below_bytes() const = 0;
  /// Whether reduce_scatter and all_gather serve (echo::sequence_parallel).
  virtual bool sequence_parallel() const = 0;
};

using factory = std::unique_ptr<instance> (*)(const bootstrap&, const options&);

struct entry {
  key name;  ///< quantizer, compensator and registry order (common/registry.hpp; nccl's after cuda_ipc's)
  const char* transport;
  bool sequence_parallel;  ///< the object serves reduce_scatter and all_gather (tool::torch_sp)
  factory make;
};

/// Every compiled instantiation (table.cpp), in the registry's order.
const std::vector<entry>& table();
/// The entry for these names (with sequence_parallel: one that serves it); throws
/// std::invalid_argument naming what exists.
const entry& find(const std::string& quant, int bits, int group, bool rotate, int clip, const std::string& comp,
                  const std::string& storage, const std::string& transport, bool sequence_parallel);

}  // namespace echo_py::torch_ops
