// transport::cuda_ipc::make_plan: how the cuda_ipc pipeline cuts a call. Random inputs over the ranges the
// engine feeds it (grids of 1-400 blocks, rings of 0 - 512 MiB, every stage lag), checked against
// what the kernel relies on: every tile has a flag, a round fits the ring, and an overlapped call
// that reuses slots obeys the flow-control rule R >= (2 L + 1) W with R a multiple of W (a plan
// that broke it would let a warp overwrite a slot its peer has not read: wrong data, no error).
#include <echo/transport/cuda_ipc/plan.cuh>

#include "support/random.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <string>

using echo::transport::cuda_ipc::make_plan;
using echo::transport::cuda_ipc::plan;
using echo::transport::cuda_ipc::plan_inputs;

namespace {

plan_inputs random_inputs(echo_test::rng& rng) {
  plan_inputs in;
  in.block_warps = rng.coin() ? 8 : rng.uniform_int<size_t>(2, 32);
  in.resident = in.block_warps * rng.uniform_int<size_t>(1, 400);
  in.subs0 = rng.coin(0.25) ? rng.uniform_int<size_t>(0, 100)
                            : rng.uniform_int<size_t>(0, size_t(1) << rng.uniform_int<int>(1, 24));
  in.u_max = rng.uniform_int<size_t>(1, 40);
  in.flag_tiles = rng.uniform_int<size_t>(64, 1 << 16);
  in.sub_bytes = rng.uniform_int<size_t>(64, 4200);
  in.ring_bytes = (rng.coin(0.25) ? rng.uniform_int<size_t>(0, 1 << 20)
                                  : rng.uniform_int<size_t>(size_t(64) << 10, size_t(512) << 20)) &
                  ~size_t(255);
  in.stage_lag = rng.uniform_int<size_t>(0, 4);
  return in;
}

}  // namespace

TEST_CASE("make_plan: every tile has a flag, rounds fit the ring, reused slots obey the flow-control rule") {
  ECHO_TEST_RNG(rng);
  size_t refused = 0, reused = 0, cut_u = 0;
  for (int k = 0; k < 200000; ++k) {
    const plan_inputs in = random_inputs(rng);
    const plan p = make_plan(in);
    CAPTURE(in.subs0);
    CAPTURE(in.resident);
    CAPTURE(in.block_warps);
    CAPTURE(in.u_max);
    CAPTURE(in.flag_tiles);
    CAPTURE(in.ring_bytes);
    CAPTURE(in.sub_bytes);
    CAPTURE(in.stage_lag);
    if (p.why) {
      ++refused;
      // Refused only where the ring holds no tile of the plan's size, or (overlapped, slots
      // reused) fewer than one block's (2 L + 1) tiles a warp: an error status, never a launch.
      const size_t slots = in.ring_bytes / (p.U * in.sub_bytes);
      REQUIRE((slots == 0 || p.tiles0 + in.resident >= (size_t(1) << 32) ||
               (in.stage_lag > 0 && p.tiles0 > slots && slots < (2 * in.stage_lag + 1) * in.block_warps)));
      REQUIRE(p.warps == 0);
      REQUIRE(p.grid == 0);
      continue;
    }
    const size_t slots = in.ring_bytes / (p.U * in.sub_bytes);
    REQUIRE(p.U >= 1);
    REQUIRE(p.U <= std::max(in.u_max, (in.subs0 + in.flag_tiles - 1) / in.flag_tiles));
    REQUIRE(p.tiles0 == (in.subs0 + p.U - 1) / p.U);
    REQUIRE(p.tiles0 <= in.flag_tiles);  // every tile of the largest segment has its flag
    REQUIRE(p.ring >= 1);
    REQUIRE(p.ring <= slots);  // ring slots fit the ring's bytes
    REQUIRE(p.warps <= in.resident);
    REQUIRE(p.grid == static_cast<int>((p.warps + in.block_warps - 1) / in.block_warps));
    if (in.subs0 > 0) REQUIRE(p.warps >= 1);
    if (in.stage_lag == 0) {
      REQUIRE(p.warps <= std::min(p.tiles0, p.ring));  // a round: one tile a warp, at most the ring
    } else if (p.tiles0 > p.ring) {
      ++reused;
      REQUIRE(p.ring % p.warps == 0);
      REQUIRE(p.warps % in.block_warps == 0);
      REQUIRE(p.ring >= (2 * in.stage_lag + 1) * p.warps);
    } else {
      REQUIRE(p.warps == std::min(in.resident, p.tiles0));
    }
    // The ring rule: where some U the flag region allows fits (2 L + 1) tiles for every resident
    // warp, no warp is left out.
    if (in.stage_lag > 0) {
      const size_t fits = in.ring_bytes / ((2 * in.stage_lag + 1) * in.resident * in.sub_bytes);
      const size_t u_min = (in.subs0 + in.flag_tiles - 1) / in.flag_tiles;
      if (fits >= std::max<size_t>(1, u_min)) {
        cut_u += p.tiles0 > p.ring;
        REQUIRE(p.warps == std::min(in.resident, p.tiles0));
      }
    }
  }
  // The draws reach every branch.
  CHECK(refused > 0);
  CHECK(reused > 0);
  CHECK(cut_u > 0);  // the rule kept every warp of a call that reuses slots
}

TEST_CASE("make_plan: small messages spread one sub-tile a flag; large ones amortise flags") {
  plan_inputs in;
  in.block_warps = 8;
  in.resident = 8 * 264;  // 132 SMs, 2 blocks of 8 warps
  in.u_max = 16;
  in.flag_tiles = 4096;
  in.sub_bytes = 528;  // 32 lanes x 16 values of 4-bit codes with their group parameters
  in.ring_bytes = size_t(16) << 20;
  in.subs0 = 1000;  // phase schedule: fewer sub-tiles than spread_warps
  CHECK(make_plan(in).U == 1);
  in.subs0 = 2048 * 8;
  CHECK(make_plan(in).U == 8);
  in.subs0 = size_t(1) << 22;  // capped by the policy's flag size, then raised by the flag region
  CHECK(make_plan(in).U == 1024);
  in.stage_lag = 1;  // overlapped: U follows subs0 / (4 x resident warps), at most u_max
  in.flag_tiles = size_t(1) << 16;
  in.ring_bytes = size_t(64) << 20;
  in.subs0 = 4 * in.resident * 3;
  CHECK(make_plan(in).U == 3);
  in.subs0 = 4 * in.resident * 100;
  CHECK(make_plan(in).U == 16);
  CHECK(make_plan(in).warps == in.resident);
  // A measured case: 8-bit at 1 GiB, P = 2, under the heavy wide policy (132 SMs x 3
  // blocks of 8 warps, 16 sub-tiles of 528 B a flag, 64 MiB a peer). 3 x 3168 tiles of 16
  // sub-tiles do not fit the ring, so the plan covers 13 and keeps every warp (it used to keep 2640).
  in.resident = 3168;
  in.subs0 = 524288;
  in.flag_tiles = 131073;
  const plan cut = make_plan(in);
  CHECK(cut.U == 13);
  CHECK(cut.warps == 3168);
  CHECK(cut.ring >= 3 * cut.warps);
  CHECK(cut.ring % cut.warps == 0);
  in.ring_bytes = 0;
  CHECK(make_plan(in).why != nullptr);
  // A segment of 2^32 tiles or more would overflow the kernel's 32-bit tile index: refused.
  in.ring_bytes = size_t(64) << 20;
  in.subs0 = size_t(1) << 42;
  in.flag_tiles = (size_t(1) << 37) + 1;
  const plan huge = make_plan(in);
  CHECK(huge.tiles0 >= (size_t(1) << 32));
  REQUIRE(huge.why != nullptr);
  CHECK(std::string(huge.why).find("32-bit") != std::string::npos);
}
