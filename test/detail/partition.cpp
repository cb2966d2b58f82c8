// detail::partition: how a message is cut into P owned segments.
#include <echo/detail/partition.cuh>
#include <echo/quant/none.cuh>
#include <echo/quant/zero_aware.cuh>

#include "support/random.hpp"

#include <doctest/doctest.h>

TEST_CASE("partition: contiguous whole-granule segments covering [0, n), dealt as evenly as possible") {
  ECHO_TEST_RNG(rng);
  static_assert(echo::detail::granule_of<echo::quant::none>() == 256, "");
  static_assert(echo::detail::granule_of<echo::quant::zero_aware<4, 128>>() == 128, "");
  std::vector<size_t> sizes = echo_test::awkward_sizes();
  sizes.push_back(0);
  for (int k = 0; k < 20; ++k) sizes.push_back(rng.uniform_int<size_t>(1, 100000));
  for (size_t n : sizes)
    for (size_t granule : {size_t(32), size_t(128), size_t(256)})
      for (int P = 1; P <= 16; ++P) {
        CAPTURE(n);
        CAPTURE(granule);
        CAPTURE(P);
        const echo::detail::partition part{n, granule, P};
        REQUIRE(part.granules() == (n + granule - 1) / granule);
        REQUIRE(part.begin(0) == 0);
        REQUIRE(part.end(P - 1) == n);
        size_t smallest = SIZE_MAX, largest = 0;
        for (int j = 0; j < P; ++j) {
          REQUIRE(part.end(j) >= part.begin(j));
          if (j + 1 < P) REQUIRE(part.end(j) == part.begin(j + 1));
          const size_t g = part.granule_begin(j + 1) - part.granule_begin(j);
          smallest = std::min(smallest, g);
          largest = std::max(largest, g);
          if (j > 0) REQUIRE(part.granule_begin(j) - part.granule_begin(j - 1) >= g);  // the extra ones first
          if (part.end(j) < n) REQUIRE(part.size(j) % granule == 0);                  // only the last may be short
          REQUIRE((part.begin(j) % granule == 0 || part.begin(j) == n));  // empty trailing segments start at n
        }
        REQUIRE(largest - smallest <= 1);
      }
}
