// instance_impl<Q, Transport, C>: one echo::all_reduce behind the type-erased torch_ops::instance.
// Included by the per-family .cu files only (it instantiates the device pipeline).
#pragma once

#include "../common/quantizers.hpp"
#include "instance.hpp"

#include <echo/detail/collective_setup.cuh>
#include <echo/echo.cuh>

#include <cstring>
#include <type_traits>
#include <vector>

namespace echo_py::torch_ops {

namespace detail {

/// transport::nccl needs an NCCL communicator of the ranks: made here from a unique id that
/// rank 0 draws and the bootstrap all-gather hands to everyone. Owned by the instance.
/// Collective as echo's constructors are (echo/detail/collective_setup.cuh): when rank 0 cannot
/// draw the id (ncclGetUniqueId: no network interface, a bootstrap error) every rank throws at
/// the id's exchange, before any rank enters ncclCommInitRank, which would wait for it without a
/// timeout. (The device is already current: ops.cpp's guard; setting it again costs nothing.) A
/// failure inside ncclCommInitRank itself is NCCL's own, as for any NCCL communicator.
inline ncclComm_t make_nccl(const bootstrap& b) {
  const echo::communicator boot(b.rank, b.size, b.device, b.all_gather);
  echo::detail::collective_setup setup(boot, "echo.create (its NCCL communicator)");
  ncclUniqueId mine{};
  setup.local([&] {
    ECHO_CUDA_TRY(cudaSetDevice(b.device));
    if (b.rank == 0) ECHO_NCCL_TRY(ncclGetUniqueId(&mine));
  });
  const std::vector<ncclUniqueId> all = setup.all_gather(mine);
  ncclComm_t comm = nullptr;
  ECHO_NCCL_TRY(ncclCommInitRank(&comm, b.size, all[0], b.rank));
  return comm;
}

}  // namespace detail

template <class Q, class Transport, class C>
class instance_impl final : public instance {
  using AR = echo::all_reduce<Q, Transport, C>;
  static constexpr bool nccl = std::is_same<Transport, echo::transport::nccl::tag>::value;

 public:
  instance_impl(const bootstrap& b, const options& o) : device_(b.device) {
    echo::all_reduce_options opt;
    opt.spin_limit_seconds = o.spin_limit_seconds;
    opt.unquantized_below_bytes = o.unquantized_below_bytes;
    opt.check_pointers = false;  // the op has checked every tensor's device already
    if constexpr (nccl) nccl_ = detail::make_nccl(b);
    try {
      const echo::communicator comm(b.rank, b.size, b.device, b.all_gather, nccl_);
      ar_ = std::make_unique<AR>(comm, o.max_elements, opt);  // throws on every rank or on none
    } catch (...) {
      // The destructor does not run for a constructor that throws. Every rank is here together,
      // but abort, not destroy: an error path must not wait on NCCL.
      if (nccl_) (void)ncclCommAbort(nccl_);
      throw;
    }
  }

  ~instance_impl() override {
    ar_.reset();
    if (nccl_) (void)ncclCommDestroy(nccl_);
  }

  echo::status all_reduce(echo::dtype t, const void* in, void* out, size_t n, void* stream, void* state,
                          size_t state_bytes, bool deferred, bool closes) override {
    if (closes) return ar_->close_chain(t, in, out, n, static_cast<cudaStream_t>(stream), view(state, state_bytes));
    const auto mode = deferred ? echo::state_update::deferred : echo::state_update::fused;
    return (*ar_)(t, in, out, n, static_cast<cudaStream_t>(stream), view(state, state_bytes), mode);
  }

  echo::status all_reduce_rms_norm(echo::dtype t, const void* in, void* out, size_t n, void* stream, void* state,
                                   size_t state_bytes, bool deferred, bool closes,
                                   const echo::epilogue::residual_rms_norm<void>& e) override {
    if (closes) return ar_->close_chain(t, in, out, n, static_cast<cudaStream_t>(stream), e, view(state, state_bytes));
    const auto mode = deferred ? echo::state_update::deferred : echo::state_update::fused;
    return (*ar_)(t, in, out, n, static_cast<cudaStream_t>(stream), e, view(state, state_bytes), mode);
  }

  echo::status update(echo::dtype t, const void* in, size_t n, void* stream, void* state, size_t state_bytes) override {
    return ar_->update(t, in, n, static_cast<cudaStream_t>(stream), view(state, state_bytes));
  }

  echo::status check() override { return ar_->check(); }

  std::string last_error() const override { return ar_->last_error(); }
  size_t state_bytes(size_t n) const override { return AR::state_bytes(n); }
  size_t unquantized_below_bytes() const override { return ar_->unquantized_below_bytes(); }

 private:
  typename AR::view_type view(void* state, size_t bytes) const {
    if constexpr (C::keeps_state) return typename AR::view_type(state, bytes, device_);
    (void)state, (void)bytes;
    return {};
  }

  int device_;
  ncclComm_t nccl_ = nullptr;
  std::unique_ptr<AR> ar_;
};

template <class Q, class Transport, class C>
std::unique_ptr<instance> make(const bootstrap& b, const options& o) {
  return std::make_unique<instance_impl<Q, Transport, C>>(b, o);
}

/// Q with compensator C, where C keeps Q's errors (comp::holds_errors_of: no clip on a step state).
template <class Transport, class Q, class C>
void add_one(std::vector<entry>& table) {
  if constexpr (echo::comp::holds_errors_of<C, Q>::value)
    table.push_back({Q::name, bits_of<Q>(), group_of<Q>(), rotate_of<Q>(), clip_of<Q>(), comp_names<C>::comp,
                     comp_names<C>::storage, Transport::name, &make<Q, Transport, C>});
}

template <class Transport, class Q, class... C>
void add(std::vector<entry>& table, type_list<C...>) {
  (add_one<Transport, Q, C>(table), ...);
}

/// Adds quantizer I of a family (common/quantizers.hpp) with every compensator over Transport:
/// the content of one generated translation unit (torch_ops.cmake), whose idea of the family's
/// length Size is checked here.
template <class Transport, class Family, size_t I, size_t Size, class Comps = compensators>
void add_quantizer(std::vector<entry>& table) {
  static_assert(Family::size == Size, "the family's length in python/src/torch/torch_ops.cmake is stale");
  add<Transport, typename Family::template at<I>>(table, Comps{});
}

}  // namespace echo_py::torch_ops
