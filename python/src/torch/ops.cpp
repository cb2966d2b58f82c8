// TORCH_LIBRARY(echo, ...): Echo's all-reduce as PyTorch ops on the current CUDA stream.
//
//   echo::create(ProcessGroup group, bool bootstrap_on_cuda, int device, int max_elements, str quant,
//                int bits, int group_size, str comp, str storage, str transport,
//                int unquantized_below_bytes, float spin_limit_s, bool rotate, int clip,
//                bool sequence_parallel) -> int                               (collective)
//   echo::all_reduce(int handle, Tensor input, Tensor(a!) out, Tensor(b!)? state, bool deferred,
//                    bool closes) -> ()                       (closes: the chain's last call, at 8 bits)
//   echo::all_reduce_rms_norm(int handle, Tensor input, Tensor(a!) out, Tensor(b!) residual, Tensor weight,
//                             float epsilon, Tensor(c!)? state, bool deferred, bool closes) -> ()
//                                   (the all-reduce, then residual += it and out = RMSNorm(residual) * weight)
//   echo::update(int handle, Tensor input, Tensor(a!) state) -> ()                 (the deferred half)
//   echo::reduce_scatter(int handle, Tensor input, Tensor(a!) out, Tensor(b!)? state) -> ()
//                                   (out: this rank's segment of the sum, input.numel() / P values)
//   echo::all_gather(int handle, Tensor input, Tensor(a!) out) -> ()    (out: the P ranks' inputs)
//   echo::check(int handle) -> ()          raises if a launch saw a peer timeout / mismatch
//   echo::destroy(int handle) -> ()
//   echo::state_bytes(int handle, int n) -> int
//   echo::unquantized_below_bytes(int handle) -> int
//   echo::instantiations() -> str[]
//
// A handle names one echo::all_reduce from the table (table.cpp). The error-feedback state is a
// caller-owned uint8 CUDA tensor (all zero = a fresh chain), so torch.compile sees its mutation
// and a CUDA graph captures it at a fixed address. Fake implementations: echo_allreduce/ops.py.
#include "instance.hpp"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/library.h>

#include <cstring>
#include <deque>
#include <mutex>
#include <stdexcept>

namespace echo_py::torch_ops {
namespace {

struct slot {
  std::shared_ptr<instance> impl;  // shared: a call holds its object while another thread destroys the handle
  int device = 0;
  size_t max_elements = 0;
  bool keeps_state = false;
  int ranks = 1;
};

std::mutex registry_mutex;
// Handle h is registry[h - 1]; destroyed slots stay empty. Never freed: an object still alive at
// exit is left to the process's end (the CUDA runtime and NCCL may be gone by static destruction).
std::deque<slot>& registry = *new std::deque<slot>;  // a deque: a slot stays put as others are added

/// A copy of the handle's slot: its shared_ptr keeps the object alive for the call, even if
/// another thread (close() beside a backward pass) destroys the handle meanwhile.
slot get(int64_t handle, const char* op) {
  slot found;
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    if (handle >= 1 && static_cast<size_t>(handle) <= registry.size() && registry[handle - 1].impl)
      found = registry[handle - 1];
  }
  // Thrown with no lock held: the one GPU run crashed (SIGSEGV) on this error path while the
  // throw unwound through the lock's scope (docs/python.md); not yet confirmed to be the cause.
  TORCH_CHECK_VALUE(found.impl != nullptr, op, ": handle ", handle, " names no live Echo all-reduce (destroyed, or never created)");
  return found;
}

echo::dtype echo_dtype(const at::Tensor& t, const char* op) {
  switch (t.scalar_type()) {
    case at::kFloat: return echo::dtype::f32;
    case at::kHalf: return echo::dtype::f16;
    case at::kBFloat16: return echo::dtype::bf16;
    default: TORCH_CHECK_VALUE(false, op, ": dtype must be float32, float16 or bfloat16, got ", t.scalar_type());
  }
  return echo::dtype::f32;
}

void check_tensor(const at::Tensor& t, const char* op, const char* name, const slot& s) {
  TORCH_CHECK_VALUE(t.defined(), op, ": ", name, " is undefined");
  TORCH_CHECK_VALUE(t.is_cuda() && t.get_device() == s.device, op, ": ", name, " must be on cuda:", s.device,
                    " (this Echo all-reduce's device), got ", t.device());
  TORCH_CHECK_VALUE(t.is_contiguous(), op, ": ", name, " must be contiguous");
  TORCH_CHECK_VALUE(t.numel() == 0 || reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0, op, ": ", name,
                    " must start on a 16-byte boundary (a view at an odd offset is not)");
}

/// The state tensor of a call on n elements; (nullptr, 0) when the instance keeps none.
std::pair<void*, size_t> state_of(const std::optional<at::Tensor>& state, size_t n, const char* op, const slot& s) {
  if (!s.keeps_state) {
    TORCH_CHECK_VALUE(!state.has_value() || state->numel() == 0, op,
                      ": this Echo all-reduce has comp 'none' and keeps no state; pass no state tensor");
    return {nullptr, 0};
  }
  TORCH_CHECK_VALUE(state.has_value() && state->defined(), op,
                    ": comp 'error_feedback' needs its chain's state tensor (EchoAllReduce.new_chain)");
  const at::Tensor& t = *state;
  const size_t need = s.impl->state_bytes(n);
  TORCH_CHECK_VALUE(t.scalar_type() == at::kByte, op, ": the state tensor must be uint8, got ", t.scalar_type());
  check_tensor(t, op, "the state tensor", s);
  TORCH_CHECK_VALUE(static_cast<size_t>(t.numel()) >= need, op, ": the state tensor has ", t.numel(),
                    " bytes; a call on ", n, " elements needs ", need, " (state_bytes(n))");
  return {t.data_ptr(), static_cast<size_t>(t.numel())};
}

/// A non-success status raises: ValueError for invalid_argument, RuntimeError otherwise, with
/// echo's own account of why.
void raise_unless_success(echo::status st, const char* op, const instance& impl) {
  if (st == echo::status::success) return;
  const std::string why = impl.last_error();
  if (st == echo::status::invalid_argument)
    TORCH_CHECK_VALUE(false, op, ": ", echo::to_string(st), why.empty() ? "" : ": ", why);
  TORCH_CHECK(false, op, ": ", echo::to_string(st), why.empty() ? "" : ": ", why);
}

int64_t create(const c10::intrusive_ptr<c10d::ProcessGroup>& group, bool bootstrap_on_cuda, int64_t device,
               int64_t max_elements, const std::string& quant, int64_t bits, int64_t group_size,
               const std::string& comp, const std::string& storage, const std::string& transport,
               int64_t unquantized_below_bytes, double spin_limit_s, bool rotate, int64_t clip, bool sequence_parallel) {
  const char* op = "echo.create";
  TORCH_CHECK_VALUE(max_elements > 0, op, ": max_elements must be > 0");
  TORCH_CHECK_VALUE(spin_limit_s > 0, op, ": spin_limit_s must be > 0");
  TORCH_CHECK_VALUE(device >= 0 && device < static_cast<int64_t>(c10::cuda::device_count()), op, ": no CUDA device ",
                    device);
  const entry* e = nullptr;
  try {
    e = &find(quant, static_cast<int>(bits), static_cast<int>(group_size), rotate, static_cast<int>(clip), comp, storage,
              transport, sequence_parallel);
  } catch (const std::invalid_argument& err) {
    TORCH_CHECK_VALUE(false, err.what());
  }
  bootstrap b;
  b.rank = group->getRank();
  b.size = group->getSize();
  b.device = static_cast<int>(device);
  const at::Device where = bootstrap_on_cuda ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device)) : at::Device(at::kCPU);
  // Setup bytes (IPC handles, NCCL ids) travel over the caller's group: Echo needs no store of its
  // own. Echo all-gathers only while it is constructed; the group is let go right after, so an
  // Echo object never keeps a process group alive past torch.distributed's own tear-down.
  auto held = std::make_shared<c10::intrusive_ptr<c10d::ProcessGroup>>(group);
  b.all_gather = [held, where](const void* send, void* recv, size_t bytes) {
    if (!*held) throw echo::error("echo.create", "all-gather after construction (the group was released)", __FILE__, __LINE__);
    c10d::ProcessGroup& g = **held;
    const auto byte = at::TensorOptions().dtype(at::kByte);
    std::vector<at::Tensor> in{at::from_blob(const_cast<void*>(send), {static_cast<int64_t>(bytes)}, byte).to(byte.device(where), false, true)};
    std::vector<std::vector<at::Tensor>> out(1);
    for (int r = 0; r < g.getSize(); ++r) out[0].push_back(at::empty({static_cast<int64_t>(bytes)}, byte.device(where)));
    g.allgather(out, in)->wait();
    for (int r = 0; r < g.getSize(); ++r)
      std::memcpy(static_cast<char*>(recv) + r * bytes, out[0][r].cpu().data_ptr(), bytes);
  };
  // The op's -1 (Python's None) is the options' unset: the dispatch table's size.
  TORCH_CHECK_VALUE(unquantized_below_bytes >= -1, "echo.create: unquantized_below_bytes must be >= 0, or -1 (the "
                    "dispatch table's), got ", unquantized_below_bytes);
  options o{static_cast<size_t>(max_elements), spin_limit_s,
            unquantized_below_bytes >= 0 ? std::optional<size_t>(static_cast<size_t>(unquantized_below_bytes)) : std::nullopt};
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  std::unique_ptr<instance> impl;
  try {
    impl = e->make(b, o);
  } catch (const echo::error& err) {
    held->reset();
    TORCH_CHECK(false, op, ": ", err.what());
  }
  held->reset();
  std::lock_guard<std::mutex> lock(registry_mutex);
  const bool keeps_state = impl->state_bytes(1) > 0;
  registry.push_back({std::shared_ptr<instance>(std::move(impl)), static_cast<int>(device), static_cast<size_t>(max_elements),
                      keeps_state, b.size});
  return static_cast<int64_t>(registry.size());
}

/// The checks both all-reduce ops make of input, out, the size, the mode and the state; the
/// call's n and state (nullptr, 0 without state).
struct call_args {
  size_t n;
  std::pair<void*, size_t> state;
};
call_args check_call(const slot& s, const char* op, const at::Tensor& input, const at::Tensor& out,
                     const std::optional<at::Tensor>& state, bool deferred, bool closes) {
  check_tensor(input, op, "input", s);
  check_tensor(out, op, "out", s);
  TORCH_CHECK_VALUE(out.scalar_type() == input.scalar_type(), op, ": out is ", out.scalar_type(), ", input ",
                    input.scalar_type());
  TORCH_CHECK_VALUE(out.numel() == input.numel(), op, ": out has ", out.numel(), " elements, input ", input.numel());
  const size_t n = static_cast<size_t>(input.numel());
  TORCH_CHECK_VALUE(n <= s.max_elements, op, ": ", n, " elements exceed max_elements = ", s.max_elements);
  TORCH_CHECK_VALUE(!deferred || input.data_ptr() != out.data_ptr(), op,
                    ": a deferred call cannot be in place (update re-reads the input)");
  TORCH_CHECK_VALUE(!(deferred && closes), op, ": a closing call keeps no error: it cannot be deferred");
  return {n, state_of(state, n, op, s)};
}

void all_reduce(int64_t handle, const at::Tensor& input, const at::Tensor& out, const std::optional<at::Tensor>& state,
                bool deferred, bool closes) {
  const char* op = "echo.all_reduce";
  const slot s = get(handle, op);
  const echo::dtype t = echo_dtype(input, op);
  const auto [n, st] = check_call(s, op, input, out, state, deferred, closes);
  if (n == 0) return;
  c10::cuda::CUDAGuard guard(input.device());
  cudaStream_t stream = at::cuda::getCurrentCUDAStream(input.get_device()).stream();
  raise_unless_success(
      s.impl->all_reduce(t, input.data_ptr(), out.data_ptr(), n, stream, st.first, st.second, deferred, closes), op, *s.impl);
}

void all_reduce_rms_norm(int64_t handle, const at::Tensor& input, const at::Tensor& out, const at::Tensor& residual,
                         const at::Tensor& weight, double epsilon, const std::optional<at::Tensor>& state, bool deferred,
                         bool closes) {
  const char* op = "echo.all_reduce_rms_norm";
  const slot s = get(handle, op);
  const echo::dtype t = echo_dtype(input, op);
  const auto [n, st] = check_call(s, op, input, out, state, deferred, closes);
  check_tensor(residual, op, "residual", s);
  check_tensor(weight, op, "weight", s);
  for (const auto* x : {&residual, &weight})
    TORCH_CHECK_VALUE(x->scalar_type() == input.scalar_type(), op, ": residual and weight must have input's dtype ",
                      input.scalar_type(), ", got ", x->scalar_type());
  TORCH_CHECK_VALUE(residual.numel() == input.numel(), op, ": residual must have ", input.numel(),
                    " elements (input's), got ", residual.numel());
  TORCH_CHECK_VALUE(weight.numel() > 0 && input.numel() % weight.numel() == 0, op, ": input's ", input.numel(),
                    " elements are not whole rows of weight's ", weight.numel());
  if (n == 0) return;
  c10::cuda::CUDAGuard guard(input.device());
  cudaStream_t stream = at::cuda::getCurrentCUDAStream(input.get_device()).stream();
  const echo::epilogue::residual_rms_norm<void> e{residual.data_ptr(), weight.data_ptr(), static_cast<size_t>(weight.numel()),
                                                  static_cast<float>(epsilon)};
  raise_unless_success(s.impl->all_reduce_rms_norm(t, input.data_ptr(), out.data_ptr(), n, stream, st.first, st.second,
                                                   deferred, closes, e),
                       op, *s.impl);
}

void update(int64_t handle, const at::Tensor& input, const at::Tensor& state) {
  const char* op = "echo.update";
  const slot s = get(handle, op);
  const echo::dtype t = echo_dtype(input, op);
  check_tensor(input, op, "input", s);
  const size_t n = static_cast<size_t>(input.numel());
  TORCH_CHECK_VALUE(n <= s.max_elements, op, ": ", n, " elements exceed max_elements = ", s.max_elements);
  const auto st = state_of(std::optional<at::Tensor>(state), n, op, s);
  if (n == 0 || !st.first) return;
  c10::cuda::CUDAGuard guard(input.device());
  cudaStream_t stream = at::cuda::getCurrentCUDAStream(input.get_device()).stream();
  raise_unless_success(s.impl->update(t, input.data_ptr(), n, stream, st.first, st.second), op, *s.impl);
}

/// The checks both sequence-parallel ops make: an object that serves them, input and out on its
/// device, one dtype, out of `out_numel` elements for an input of `in_numel`.
echo::dtype check_segments(const slot& s, const char* op, const at::Tensor& input, const at::Tensor& out) {
  TORCH_CHECK_VALUE(s.impl->sequence_parallel(), op,
                    ": this Echo object does not serve the sequence-parallel pair (create it with sequence_parallel=True)");
  const echo::dtype t = echo_dtype(input, op);
  check_tensor(input, op, "input", s);
  check_tensor(out, op, "out", s);
  TORCH_CHECK_VALUE(out.scalar_type() == input.scalar_type(), op, ": out is ", out.scalar_type(), ", input ",
                    input.scalar_type());
  return t;
}

void reduce_scatter(int64_t handle, const at::Tensor& input, const at::Tensor& out, const std::optional<at::Tensor>& state) {
  const char* op = "echo.reduce_scatter";
  const slot s = get(handle, op);
  const echo::dtype t = check_segments(s, op, input, out);
  const size_t n = static_cast<size_t>(input.numel());
  TORCH_CHECK_VALUE(n % s.ranks == 0 && static_cast<size_t>(out.numel()) == n / s.ranks, op, ": out must have input's ",
                    n, " elements / P = ", s.ranks, ", got ", out.numel());
  TORCH_CHECK_VALUE(n <= s.max_elements, op, ": ", n, " elements exceed max_elements = ", s.max_elements);
  const auto st = state_of(state, n, op, s);
  if (n == 0) return;
  c10::cuda::CUDAGuard guard(input.device());
  cudaStream_t stream = at::cuda::getCurrentCUDAStream(input.get_device()).stream();
  raise_unless_success(s.impl->reduce_scatter(t, input.data_ptr(), out.data_ptr(), n, stream, st.first, st.second), op,
                       *s.impl);
}

void all_gather(int64_t handle, const at::Tensor& input, const at::Tensor& out) {
  const char* op = "echo.all_gather";
  const slot s = get(handle, op);
  const echo::dtype t = check_segments(s, op, input, out);
  const size_t m = static_cast<size_t>(input.numel());
  TORCH_CHECK_VALUE(static_cast<size_t>(out.numel()) == m * s.ranks, op, ": out must have P = ", s.ranks,
                    " times input's ", m, " elements, got ", out.numel());
  TORCH_CHECK_VALUE(m * s.ranks <= s.max_elements, op, ": P x ", m, " elements exceed max_elements = ", s.max_elements);
  if (m == 0) return;
  c10::cuda::CUDAGuard guard(input.device());
  cudaStream_t stream = at::cuda::getCurrentCUDAStream(input.get_device()).stream();
  raise_unless_success(s.impl->all_gather(t, input.data_ptr(), out.data_ptr(), m, stream), op, *s.impl);
}

void check(int64_t handle) {
  const slot s = get(handle, "echo.check");
  raise_unless_success(s.impl->check(), "echo.check", *s.impl);
}

void destroy(int64_t handle) {
  std::shared_ptr<instance> dead;
  int device = 0;
  {
    std::lock_guard<std::mutex> lock(registry_mutex);
    TORCH_CHECK_VALUE(handle >= 1 && static_cast<size_t>(handle) <= registry.size(), "echo.destroy: no handle ", handle);
    dead = std::move(registry[handle - 1].impl);
    device = registry[handle - 1].device;
  }
  if (dead) {  // destroying twice is a no-op; a call still running on another thread frees it last
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    dead.reset();
  }
}

int64_t state_bytes(int64_t handle, int64_t n) {
  TORCH_CHECK_VALUE(n >= 0, "echo.state_bytes: n must be >= 0");
  return static_cast<int64_t>(get(handle, "echo.state_bytes").impl->state_bytes(static_cast<size_t>(n)));
}

int64_t unquantized_below_bytes(int64_t handle) {
  return static_cast<int64_t>(get(handle, "echo.unquantized_below_bytes").impl->unquantized_below_bytes());
}

/// "quant bits group_size rotate clip comp storage transport sp" per entry (quant none: bits and
/// group 0; rotate 0 or 1; clip in 1024ths, 1024: none; sp 1: it serves the sequence-parallel pair).
std::vector<std::string> instantiations() {
  std::vector<std::string> v;
  for (const entry& e : table())
    v.push_back(std::string(e.name.quant.name) + " " + std::to_string(e.name.quant.bits) + " " +
                std::to_string(e.name.quant.group) + " " + std::to_string(e.name.quant.rotate ? 1 : 0) + " " +
                std::to_string(e.name.quant.clip) + " " + e.name.comp + " " + (*e.name.storage ? e.name.storage : "-") +
                " " + e.transport + " " + (e.sequence_parallel ? "1" : "0"));
  return v;
}

void cpu_not_supported(int64_t, const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, bool, bool) {
  TORCH_CHECK_VALUE(false, "echo.all_reduce: tensors must be on cuda:<this rank's device>, got CPU tensors "
                           "(on CPU use EchoAllReduce(backend='reference'))");
}
void cpu_rms_norm_not_supported(int64_t, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, double,
                                const std::optional<at::Tensor>&, bool, bool) {
  TORCH_CHECK_VALUE(false, "echo.all_reduce_rms_norm: tensors must be on cuda:<this rank's device>, got CPU tensors "
                           "(on CPU use EchoAllReduce(backend='reference'))");
}
void cpu_update_not_supported(int64_t, const at::Tensor&, const at::Tensor&) {
  TORCH_CHECK_VALUE(false, "echo.update: tensors must be on cuda:<this rank's device>, got CPU tensors");
}
void cpu_reduce_scatter_not_supported(int64_t, const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&) {
  TORCH_CHECK_VALUE(false, "echo.reduce_scatter: tensors must be on cuda:<this rank's device>, got CPU tensors "
                           "(on CPU use EchoAllReduce(backend='reference'))");
}
void cpu_all_gather_not_supported(int64_t, const at::Tensor&, const at::Tensor&) {
  TORCH_CHECK_VALUE(false, "echo.all_gather: tensors must be on cuda:<this rank's device>, got CPU tensors "
                           "(on CPU use EchoAllReduce(backend='reference'))");
}

}  // namespace
}  // namespace echo_py::torch_ops

TORCH_LIBRARY(echo, m) {
  using namespace echo_py::torch_ops;
  m.def(
      "create(__torch__.torch.classes.c10d.ProcessGroup group, bool bootstrap_on_cuda, int device, int max_elements, "
      "str quant, int bits, int group_size, str comp, str storage, str transport, int unquantized_below_bytes, "
      "float spin_limit_s, bool rotate=False, int clip=1024, bool sequence_parallel=False) -> int",
      &create);
  m.def("all_reduce(int handle, Tensor input, Tensor(a!) out, Tensor(b!)? state=None, bool deferred=False, "
        "bool closes=False) -> ()");
  m.def("all_reduce_rms_norm(int handle, Tensor input, Tensor(a!) out, Tensor(b!) residual, Tensor weight, "
        "float epsilon, Tensor(c!)? state=None, bool deferred=False, bool closes=False) -> ()");
  m.def("update(int handle, Tensor input, Tensor(a!) state) -> ()");
  m.def("reduce_scatter(int handle, Tensor input, Tensor(a!) out, Tensor(b!)? state=None) -> ()");
  m.def("all_gather(int handle, Tensor input, Tensor(a!) out) -> ()");
  m.def("check(int handle) -> ()", &check);
  m.def("destroy(int handle) -> ()", &destroy);
  m.def("state_bytes(int handle, int n) -> int", &state_bytes);
  m.def("unquantized_below_bytes(int handle) -> int", &unquantized_below_bytes);
  m.def("instantiations() -> str[]", &instantiations);
}

TORCH_LIBRARY_IMPL(echo, CUDA, m) {
  m.impl("all_reduce", &echo_py::torch_ops::all_reduce);
  m.impl("all_reduce_rms_norm", &echo_py::torch_ops::all_reduce_rms_norm);
  m.impl("update", &echo_py::torch_ops::update);
  m.impl("reduce_scatter", &echo_py::torch_ops::reduce_scatter);
  m.impl("all_gather", &echo_py::torch_ops::all_gather);
}

TORCH_LIBRARY_IMPL(echo, CPU, m) {
  m.impl("all_reduce", &echo_py::torch_ops::cpu_not_supported);
  m.impl("all_reduce_rms_norm", &echo_py::torch_ops::cpu_rms_norm_not_supported);
  m.impl("update", &echo_py::torch_ops::cpu_update_not_supported);
  m.impl("reduce_scatter", &echo_py::torch_ops::cpu_reduce_scatter_not_supported);
  m.impl("all_gather", &echo_py::torch_ops::cpu_all_gather_not_supported);
}
