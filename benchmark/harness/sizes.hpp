// Message sizes as people write them ("64K", "1M", "1G": binary units) and as the tools print them.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace echo_bench {

constexpr size_t KiB = size_t(1) << 10, MiB = size_t(1) << 20, GiB = size_t(1) << 30;

/// "64KiB", "1GiB", "12B": the largest unit that divides b.
std::string human_bytes(size_t b);

/// Decimal bytes with an optional binary suffix K / M / G (also written KB / KiB, ...; any case),
/// in [1, max_bytes] and a multiple of `multiple_of`. Throws std::invalid_argument with the reason.
size_t parse_size(const std::string& item, size_t max_bytes, size_t multiple_of = 1);

/// A comma list of parse_size items, sorted ascending, duplicates dropped (one trailing comma
/// is tolerated). Throws std::invalid_argument.
std::vector<size_t> parse_sizes(const std::string& list, size_t max_bytes, size_t multiple_of = 1);

}  // namespace echo_bench
