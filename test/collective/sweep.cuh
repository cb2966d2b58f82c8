// The bit-exactness sweep shared by the per-quantizer GPU tests: every bits in {4, 8} x group in
// {32, 128, 256} x compensator x element type, at awkward sizes, against echo::reference, for
// both transports.
#pragma once

#include "support/gpu_harness.cuh"

namespace echo_test {

// A small workspace makes the 1 000 003-element call wrap around cuda_ipc's rings (flow control)
// and cut transport::nccl's call into several chunks.
inline constexpr size_t sweep_max = 1000003;
inline const size_t sweep_sizes[] = {1, 127, 4097, 1000003, 4097};

template <class Q, class C, class T, class Transport>
void sweep_one() {
  echo::all_reduce_options opt;
  opt.workspace_bytes = size_t(256) << 10;
  opt.spin_limit_seconds = 5;
  reference_check<Q, C, T, Transport> rc(sweep_max, opt);
  for (size_t n : sweep_sizes) rc.step(n);
}

template <class Q, class Transport>
void sweep_quantizer() {
  if (!runnable<Transport>()) return;
  using ef = echo::comp::error_feedback<echo::comp::int8_state>;  // int8 codes of the error
  // the default state: in units of the data step where the grid holds zero, else (naive_zero_point)
  // in units of a step fitted to the errors
  using efs = echo::comp::error_feedback<>;
  using ef16 = echo::comp::error_feedback<echo::bfloat16_t>;
  using none = echo::comp::none;
  sweep_one<Q, none, float, Transport>();
  sweep_one<Q, none, echo::half_t, Transport>();
  sweep_one<Q, none, echo::bfloat16_t, Transport>();
  sweep_one<Q, ef, float, Transport>();
  sweep_one<Q, ef16, echo::half_t, Transport>();
  sweep_one<Q, efs, echo::bfloat16_t, Transport>();
}

}  // namespace echo_test

/// One TEST_CASE per bits x group x transport for quantizer template QT.
#define ECHO_SWEEP_CASE(QT, B, G)                                                                             \
  TEST_CASE(#QT "<" #B "," #G "> cuda_ipc") { echo_test::sweep_quantizer<echo::quant::QT<B, G>, echo::transport::cuda_ipc>(); } \
  TEST_CASE(#QT "<" #B "," #G "> nccl") { echo_test::sweep_quantizer<echo::quant::QT<B, G>, echo::transport::nccl>(); }
#define ECHO_SWEEP_TESTS(QT) \
  ECHO_SWEEP_CASE(QT, 4, 32) \
  ECHO_SWEEP_CASE(QT, 4, 128) \
  ECHO_SWEEP_CASE(QT, 4, 256) \
  ECHO_SWEEP_CASE(QT, 8, 32) \
  ECHO_SWEEP_CASE(QT, 8, 128) \
  ECHO_SWEEP_CASE(QT, 8, 256)
