// The bit-exactness sweep shared by the per-quantizer GPU tests: every bits in {4, 8} x group
// in {32, 128, 256} x compensator x element type, at awkward sizes, against echo::reference.
#pragma once

#include "support/gpu_harness.cuh"

namespace echo_test {

// A 1 MiB workspace makes the 1 000 003-element call stream through it in several rounds.
inline constexpr size_t sweep_max = 1000003;
inline const size_t sweep_sizes[] = {1, 127, 4097, 1000003};

template <class Q, class C, class T>
void sweep_one() {
  echo::all_reduce_options opt;
  opt.workspace_bytes = size_t(1) << 20;
  opt.spin_limit_seconds = 5;
  reference_check<Q, C, T> rc(sweep_max, opt);
  CHECK(rc.ar(0).pipeline_workspace_bytes() < sweep_max * sizeof(T));  // so it streams in rounds
  for (size_t n : sweep_sizes) rc.step(n);
}

template <class Q>
void sweep_quantizer() {
  using ef = echo::comp::error_feedback<echo::bfloat16_t>;
  using none = echo::comp::none;
  sweep_one<Q, none, float>();
  sweep_one<Q, none, echo::half_t>();
  sweep_one<Q, none, echo::bfloat16_t>();
  sweep_one<Q, ef, float>();
  sweep_one<Q, ef, echo::half_t>();
  sweep_one<Q, ef, echo::bfloat16_t>();
}

}  // namespace echo_test

/// One TEST_CASE per bits x group for quantizer template QT.
#define ECHO_SWEEP_TESTS(QT)                                                          \
  TEST_CASE(#QT "<4,32>") { echo_test::sweep_quantizer<echo::quant::QT<4, 32>>(); }   \
  TEST_CASE(#QT "<4,128>") { echo_test::sweep_quantizer<echo::quant::QT<4, 128>>(); } \
  TEST_CASE(#QT "<4,256>") { echo_test::sweep_quantizer<echo::quant::QT<4, 256>>(); } \
  TEST_CASE(#QT "<8,32>") { echo_test::sweep_quantizer<echo::quant::QT<8, 32>>(); }   \
  TEST_CASE(#QT "<8,128>") { echo_test::sweep_quantizer<echo::quant::QT<8, 128>>(); } \
  TEST_CASE(#QT "<8,256>") { echo_test::sweep_quantizer<echo::quant::QT<8, 256>>(); }
