// The baseline every benchmark compares with: NCCL's all-reduce on every rank of a bench_context.
#pragma once

#include "context.cuh"

#include <echo/dtype.cuh>
#include <nccl.h>

#include <stdexcept>
#include <string>
#include <type_traits>

namespace echo_bench {

/// NCCL's element type for T.
template <class T>
ncclDataType_t nccl_type() {
  using S = echo::storage_of_t<T>;
  if constexpr (std::is_same<S, float>::value) return ncclFloat32;
  else if constexpr (std::is_same<S, echo::half_t>::value) return ncclFloat16;
  else return ncclBfloat16;
}

/// ncclAllReduce(type, sum) on every rank: inside ncclGroupStart/End from one thread, or (threaded)
/// from each rank's own thread, as a process per GPU and transport::nccl's runners issue it: the
/// like-for-like baseline of transport::nccl below its dispatch size, where it is ncclAllReduce.
class nccl_runner final : public runner {
 public:
  nccl_runner(bench_context& ctx, ncclDataType_t type, bool threaded = false)
      : ctx_(ctx), type_(type), threaded_(threaded) {
    for (const auto& c : ctx.comms())
      ECHO_REQUIRE(c.nccl() != nullptr, "echo_bench", "communicator::local made no NCCL communicator");
  }
  void call(size_t n, bool in_place) override {
    ECHO_NCCL_TRY(ncclGroupStart());
    ncclResult_t first = ncclSuccess;
    for (int r = 0; r < ctx_.size() && first == ncclSuccess; ++r) {
      const rank_res& R = ctx_.rank(r);
      ECHO_CUDA_TRY(cudaSetDevice(R.device));
      first = ncclAllReduce(in_place ? R.out : R.in, R.out, n, type_, ncclSum, ctx_.comms()[static_cast<size_t>(r)].nccl(),
                            R.stream);
    }
    const ncclResult_t end = ncclGroupEnd();
    if (first != ncclSuccess) throw std::runtime_error(std::string("ncclAllReduce: ") + ncclGetErrorString(first));
    if (end != ncclSuccess) throw std::runtime_error(std::string("ncclGroupEnd: ") + ncclGetErrorString(end));
  }
  bool per_rank_threads() const override { return threaded_; }
  void call_rank(int r, size_t n, bool in_place) override {
    const rank_res& R = ctx_.rank(r);
    const ncclResult_t e = ncclAllReduce(in_place ? R.out : R.in, R.out, n, type_, ncclSum,
                                         ctx_.comms()[static_cast<size_t>(r)].nccl(), R.stream);
    if (e != ncclSuccess) throw std::runtime_error(std::string("ncclAllReduce: ") + ncclGetErrorString(e));
  }
  std::string path(size_t) const override { return "nccl"; }

 private:
  bench_context& ctx_;
  ncclDataType_t type_;
  bool threaded_;
};

}  // namespace echo_bench
