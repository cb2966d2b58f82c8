// The outlier-robust 4-bit path on the device: rotated groups, a clip, and the call that closes a
// chain at 8 bits, equal to echo::reference bit for bit on every rank, for both transports, every
// element type, fused and deferred state updates, and every pipeline tier.
#include "support/gpu_harness.cuh"

#include <limits>
#include <utility>

using namespace echo_test;
using rot4 = echo::quant::rotated<echo::quant::zero_aware<4, 128>>;
using rotclip4 = echo::default_quantizer;  // rotated, clipped to 870 / 1024
using step8 = echo::comp::error_feedback<echo::comp::step8_state>;
using int8s = echo::default_compensator;
using bf16s = echo::comp::error_feedback<echo::bfloat16_t>;

namespace {

/// A chain of calls as a forward pass makes them (the same n, a tail group), closed at its end and
/// started again, under the narrow, mid and wide tiers of cuda_ipc.
template <class Q, class C, class T, class Transport>
void chains_with_close() {
  if (!runnable<Transport>()) return;
  constexpr size_t never = echo::tuning::never;
  const std::pair<size_t, size_t> tiers[] = {{never, never}, {0, never}, {never, 0}};
  const int runs = std::is_same<Transport, echo::transport::cuda_ipc::tag>::value ? 3 : 1;
  for (int t = 0; t < runs; ++t) {
    INFO("mid from " << tiers[t].first << " B, wide from " << tiers[t].second << " B");
    echo::all_reduce_options opt;
    opt.workspace_bytes = size_t(256) << 10;
    opt.mid_policy_from_bytes = tiers[t].first;
    opt.wide_policy_from_bytes = tiers[t].second;
    reference_check<Q, C, T, Transport> rc(300007, opt);
    for (const size_t n : {size_t(300007), size_t(4099), size_t(128)}) {
      for (int pass = 0; pass < 2; ++pass) {
        for (int k = 0; k < 4; ++k) rc.step(n, k == 2, C::keeps_state && k == 1 ? echo::state_update::deferred : echo::state_update::fused);
        rc.close_step(n);
      }
    }
    rc.step(1000);  // after a close the chain is fresh, and a shape change too
  }
}

template <class Q, class C>
void every_type() {
  chains_with_close<Q, C, echo::bfloat16_t, echo::transport::cuda_ipc::tag>();
  chains_with_close<Q, C, echo::half_t, echo::transport::cuda_ipc::tag>();
  chains_with_close<Q, C, float, echo::transport::cuda_ipc::tag>();
  chains_with_close<Q, C, echo::bfloat16_t, echo::transport::nccl::tag>();
}

}  // namespace

TEST_CASE("rotated 4-bit + step8 state, closed at 8 bits: device == reference") { every_type<rot4, step8>(); }
TEST_CASE("the default (rotated, clipped 4-bit + int8 state), closed at 8 bits: device == reference") { every_type<rotclip4, int8s>(); }
TEST_CASE("rotated, clipped 4-bit + bf16 state: device == reference") { every_type<rotclip4, bf16s>(); }
TEST_CASE("rotated 4-bit without compensation: close_chain() is the plain call") {
  reference_check<rot4, echo::comp::none, echo::bfloat16_t> rc(70001);
  for (int k = 0; k < 3; ++k) rc.step(70001);
  rc.close_step(70001);
}

TEST_CASE("close_chain() while a deferred update is pending is refused, and the chain is left as it was") {
  reference_check<rot4, step8, echo::bfloat16_t> rc(50000);
  rc.step(50000);
  const auto x = rc.upload_random(50000);
  rc.pool().run([&](int r) {
    REQUIRE(rc.ar(r)(rc.in(r).ptr, rc.out(r).ptr, 50000, rc.stream(r), rc.chain(r), echo::state_update::deferred) ==
            echo::status::success);
  });
  rc.pool().run([&](int r) {
    CHECK(rc.ar(r).close_chain(rc.in(r).ptr, rc.out(r).ptr, 50000, rc.stream(r), rc.chain(r)) == echo::status::invalid_argument);
    CHECK(rc.ar(r).update(rc.in(r).ptr, 50000, rc.stream(r), *rc.chain(r)) == echo::status::success);
  });
  rc.finish(x, 50000);
  rc.close_step(50000);
  rc.step(50000);
}
