// instance_impl<Q, Transport, C>: one echo::all_reduce behind the type-erased torch_ops::instance.
// Included by the generated shard .cu files only (it instantiates the device pipelines).
#pragma once

#include "../common/registry.hpp"
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

/// Ops: collective::with_sequence_parallel for the entries marked tool::torch_sp (quantizer and
/// compensator), else collective::all_reduce_only.
template <class Q, class Transport, class C, class Ops>
class instance_impl final : public instance {
  using AR = echo::all_reduce<Q, Transport, C, echo::tuning::default_policy, Ops>;
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

  echo::status reduce_scatter(echo::dtype t, const void* in, void* out, size_t n, void* stream, void* state,
                              size_t state_bytes) override {
    if constexpr (Ops::sequence_parallel)
      return ar_->reduce_scatter(t, in, out, n, static_cast<cudaStream_t>(stream), view(state, state_bytes));
    (void)t, (void)in, (void)out, (void)n, (void)stream, (void)state, (void)state_bytes;
    return echo::status::invalid_argument;
  }

  echo::status all_gather(echo::dtype t, const void* in, void* out, size_t m, void* stream) override {
    if constexpr (Ops::sequence_parallel) return ar_->all_gather(t, in, out, m, static_cast<cudaStream_t>(stream));
    (void)t, (void)in, (void)out, (void)m, (void)stream;
    return echo::status::invalid_argument;
  }

  echo::status update(echo::dtype t, const void* in, size_t n, void* stream, void* state, size_t state_bytes) override {
    return ar_->update(t, in, n, static_cast<cudaStream_t>(stream), view(state, state_bytes));
  }

  echo::status check() override { return ar_->check(); }

  std::string last_error() const override { return ar_->last_error(); }
  size_t state_bytes(size_t n) const override { return AR::state_bytes(n); }
  size_t unquantized_below_bytes() const override { return ar_->unquantized_below_bytes(); }
  bool sequence_parallel() const override { return Ops::sequence_parallel; }

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

template <class Q, class Transport, class C, class Ops>
std::unique_ptr<instance> make(const bootstrap& b, const options& o) {
  return std::make_unique<instance_impl<Q, Transport, C, Ops>>(b, o);
}

/// The pairs of shard Shard of Shards marked Tools, over Transport; over cuda_ipc a pair whose
/// quantizer and compensator are both marked tool::torch_sp serves the sequence-parallel pair too.
template <class Transport, unsigned Tools, std::size_t Shard, std::size_t Shards>
void add_transport_shard(std::vector<entry>& table, unsigned order_base) {
  for_each_pair<Tools, Shard, Shards>([&](auto q, auto c, const key& k) {
    using Q = typename decltype(q)::type;
    using C = typename decltype(c)::type;
    constexpr bool sp = std::is_same<Transport, echo::transport::cuda_ipc::tag>::value &&
                        (decltype(q)::tools & decltype(c)::tools & echo::tool::torch_sp) != 0;
    static_assert(!sp || !echo::comp::stores_in_data_steps<C>::value,
                  "echo registry: a compensator marked torch_sp stores its errors in data steps, which the "
                  "reduce-scatter's owner segment does not have (all_reduce::reduce_scatter)");
    using Ops = std::conditional_t<sp, echo::collective::with_sequence_parallel, echo::collective::all_reduce_only>;
    key name = k;
    name.order += order_base;
    table.push_back({name, Transport::name, sp, &make<Q, Transport, C, Ops>});
  });
}

/// The content of one generated translation unit (torch_ops.cmake): the registry's entries marked
/// tool::torch over cuda_ipc and tool::torch_nccl over nccl, dealt round the shards as one list (the
/// nccl ones after the cuda_ipc ones), so each shard compiles about the same number of pipelines.
template <std::size_t Shard, std::size_t Shards>
void add_shard(std::vector<entry>& table) {
  constexpr std::size_t ipc = echo::registered_with_t<echo::tool::torch, echo::registered_quantizers>::size;
  add_transport_shard<echo::transport::cuda_ipc::tag, echo::tool::torch, Shard, Shards>(table, 0);
  add_transport_shard<echo::transport::nccl::tag, echo::tool::torch_nccl, (Shard + Shards - ipc % Shards) % Shards,
                      Shards>(table, 1u << 20);
}

}  // namespace echo_py::torch_ops
