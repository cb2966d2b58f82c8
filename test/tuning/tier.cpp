// tuning::tier_for: which of a policy's variants a call runs under, by size, on the sizes of
// 2 x H200 at P = 2 (dispatch_table) and under the options that move them. The GPU tests check
// that the engine feeds it its own sizes (all_reduce_features) and follows it (last_run_*).
#include <doctest/doctest.h>

#include <echo/tuning/tier.cuh>

#include <climits>
#include <cstdint>
#include <initializer_list>

using echo::tuning::tier;
using echo::tuning::tier_for;
using echo::tuning::tier_sizes;

namespace {

constexpr size_t MiB = size_t(1) << 20;

tier_sizes sizes(size_t wide, size_t mid_from = 32 * MiB, size_t wide_from = 128 * MiB, bool has_mid = true) {
  tier_sizes s;
  s.has_wide = true;
  s.has_mid = has_mid;
  s.wide = wide;
  s.mid_from = mid_from;
  s.wide_from = wide_from;
  return s;
}

}  // namespace

TEST_CASE("the default sizes: narrow, mid, then wide by call weight; stateful calls never wide") {
  const tier_sizes lean = sizes(512 * MiB), heavy = sizes(256 * MiB), stateful = sizes(SIZE_MAX);
  for (const auto& s : {lean, heavy, stateful}) {
    CHECK(tier_for(0, s) == tier::narrow);
    CHECK(tier_for(32 * MiB - 1, s) == tier::narrow);
    CHECK(tier_for(32 * MiB, s) == tier::mid);
    CHECK(tier_for(128 * MiB, s) == tier::mid);  // wide_from applies only below mid_from
  }
  CHECK(tier_for(512 * MiB - 1, lean) == tier::mid);
  CHECK(tier_for(512 * MiB, lean) == tier::wide);
  CHECK(tier_for(256 * MiB - 1, heavy) == tier::mid);
  CHECK(tier_for(256 * MiB, heavy) == tier::wide);
  CHECK(tier_for(size_t(1) << 30, stateful) == tier::mid);
  CHECK(tier_for(size_t(1) << 62, stateful) == tier::mid);
}

TEST_CASE("a policy without a mid variant, and an unquantized call, go wide from their wide size") {
  const tier_sizes no_mid = sizes(128 * MiB, 32 * MiB, 128 * MiB, false);
  CHECK(tier_for(64 * MiB, no_mid) == tier::narrow);
  CHECK(tier_for(128 * MiB, no_mid) == tier::wide);
  const tier_sizes unquantized = sizes(64 * MiB, SIZE_MAX, 128 * MiB, false);
  CHECK(tier_for(64 * MiB - 1, unquantized) == tier::narrow);
  CHECK(tier_for(64 * MiB, unquantized) == tier::wide);
  tier_sizes none;  // neither variant: always the policy itself
  CHECK(tier_for(SIZE_MAX, none) == tier::narrow);
}

TEST_CASE("the mid tier switched off by the options: every weight goes wide from wide_from") {
  const size_t off = static_cast<size_t>(LLONG_MAX);  // options.mid_policy_from_bytes: a size no call reaches
  for (size_t wide : {size_t(512) * MiB, size_t(256) * MiB, SIZE_MAX}) {
    const tier_sizes s = sizes(wide, off);
    CHECK(tier_for(128 * MiB - 1, s) == tier::narrow);
    CHECK(tier_for(128 * MiB, s) == tier::wide);
    CHECK(tier_for(size_t(1) << 40, s) == tier::wide);
  }
  // Without a table entry (an unknown GPU or P) nothing goes wide unless the options say so.
  CHECK(tier_for(size_t(1) << 40, sizes(SIZE_MAX, off, SIZE_MAX)) == tier::narrow);
}

TEST_CASE("the mid tier moved later by the options: below it a call runs as without one") {
  // mid from 256 MiB: 4-bit without state runs narrow to 128 MiB, wide (as under a policy without
  // a mid variant) to 256 MiB, mid to its own wide size, then wide.
  const tier_sizes lean = sizes(512 * MiB, 256 * MiB);
  CHECK(tier_for(128 * MiB - 1, lean) == tier::narrow);
  CHECK(tier_for(128 * MiB, lean) == tier::wide);
  CHECK(tier_for(256 * MiB, lean) == tier::mid);
  CHECK(tier_for(512 * MiB, lean) == tier::wide);
  // mid from 0 and wide never (all_reduce_features' forced mid): mid at every size.
  const tier_sizes forced = sizes(SIZE_MAX, 0, SIZE_MAX);
  CHECK(tier_for(0, forced) == tier::mid);
  CHECK(tier_for(SIZE_MAX - 1, forced) == tier::mid);
  // wide_policy_from_bytes sets every wide size and wide_from alike: mid between the two sizes.
  const tier_sizes both = sizes(2 * MiB, 1 * MiB, 2 * MiB);
  CHECK(tier_for(MiB - 1, both) == tier::narrow);
  CHECK(tier_for(MiB, both) == tier::mid);
  CHECK(tier_for(2 * MiB - 1, both) == tier::mid);
  CHECK(tier_for(2 * MiB, both) == tier::wide);
}
