// Misuse that must not compile: each ECHO_CONTRACT_<case> is one, refused by a static_assert whose
// message the test (test/CMakeLists.txt, "contracts") expects in the compiler's output.
#include <echo/echo.cuh>

using za4 = echo::quant::zero_aware<4, 128>;

void misuse(const echo::communicator& c, const float* in, float* out, cudaStream_t s) {
#if defined(ECHO_CONTRACT_SCATTER_STEP_STATE)
  // a state in data steps has no step on the owner's segment
  echo::sequence_parallel<za4, echo::transport::cuda_ipc::tag, echo::comp::error_feedback<echo::comp::step8_state>> ar(c, 1024);
  (void)ar.reduce_scatter(in, out, 1024, s, nullptr);
#elif defined(ECHO_CONTRACT_SCATTER_ON_ALL_REDUCE)
  // the pair's kernels are built only for objects that name them
  echo::all_reduce<za4> ar(c, 1024);
  (void)ar.all_gather(in, out, 512, s);
#elif defined(ECHO_CONTRACT_SEQUENCE_PARALLEL_NCCL)
  echo::sequence_parallel<za4, echo::transport::nccl::tag> ar(c, 1024);
  (void)ar;
#endif
  (void)c, (void)in, (void)out, (void)s;
}
