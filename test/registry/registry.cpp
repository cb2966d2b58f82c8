// echo/registry.cuh: the one list the tools compile. Names must find one entry each, the shards
// must deal every entry exactly once, and the recommended configuration must be in the tools.
#include <echo/registry.cuh>

#include <doctest/doctest.h>

#include <cstring>
#include <set>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>

namespace {

using key_tuple = std::tuple<std::string, int, int, bool, int>;

key_tuple as_tuple(const echo::quantizer_key& k) { return {k.name, k.bits, k.group, k.rotate, k.clip}; }

template <unsigned Tools, class List, std::size_t Shard, std::size_t Shards>
void collect(std::vector<std::size_t>& seen) {
  echo::for_each_registered<Tools, List, Shard, Shards>([&](auto, std::size_t i) { seen.push_back(i); });
}

template <unsigned Tools, class List, std::size_t Shards, std::size_t... S>
std::vector<std::size_t> all_shards(std::index_sequence<S...>) {
  std::vector<std::size_t> seen;
  (collect<Tools, List, S, Shards>(seen), ...);
  return seen;
}

template <unsigned Tools, class List, std::size_t Shards>
void check_dealt_once() {
  std::vector<std::size_t> seen = all_shards<Tools, List, Shards>(std::make_index_sequence<Shards>{});
  const std::size_t size = echo::registered_with_t<Tools, List>::size;
  REQUIRE(seen.size() == size);
  const std::set<std::size_t> unique(seen.begin(), seen.end());
  CHECK(unique.size() == size);
  if (size) CHECK(*unique.rbegin() == size - 1);
}

template <unsigned Tools>
std::vector<key_tuple> keys() {
  std::vector<key_tuple> v;
  echo::for_each_registered<Tools, echo::registered_quantizers>(
      [&](auto e, std::size_t) { v.push_back(as_tuple(echo::key_of<typename decltype(e)::type>())); });
  return v;
}

}  // namespace

TEST_CASE("every name finds one quantizer: no two registered quantizers share a key") {
  const auto all = keys<0u>();
  REQUIRE(all.size() == echo::registered_quantizers::size);
  CHECK(std::set<key_tuple>(all.begin(), all.end()).size() == all.size());
}

TEST_CASE("every compensator name finds one compensator") {
  std::set<std::pair<std::string, std::string>> names;
  std::size_t n = 0;
  echo::for_each_registered<0u, echo::registered_compensators>([&](auto e, std::size_t) {
    using C = typename decltype(e)::type;
    names.insert({C::name, echo::storage_name<C>()});
    ++n;
  });
  CHECK(n == echo::registered_compensators::size);
  CHECK(names.size() == n);
}

TEST_CASE("the shards deal every entry exactly once, whatever their number") {
  using Q = echo::registered_quantizers;
  using C = echo::registered_compensators;
  check_dealt_once<0u, Q, 1>();
  check_dealt_once<0u, Q, 6>();
  check_dealt_once<0u, Q, 40>();  // more shards than entries: some are empty
  check_dealt_once<echo::tool::torch, Q, 20>();
  check_dealt_once<echo::tool::torch_nccl, Q, 20>();
  check_dealt_once<echo::tool::sim, Q, 3>();
  check_dealt_once<echo::tool::reference, C, 4>();
}

TEST_CASE("a mask selects the entries with all of its bits, in the registry's order") {
  const auto ref = keys<echo::tool::reference>(), both = keys<echo::tool::reference | echo::tool::torch_nccl>();
  const auto nccl = keys<echo::tool::torch_nccl>();
  CHECK(both == nccl);  // every nccl entry is also in the reference
  std::size_t j = 0;
  for (const auto& k : ref)
    if (j < both.size() && k == both[j]) ++j;
  CHECK(j == both.size());  // a subsequence: the order is kept
  // Every torch entry has a reference to check it against.
  const auto torch = keys<echo::tool::torch>(), torch_ref = keys<echo::tool::torch | echo::tool::reference>();
  CHECK(torch == torch_ref);
}

TEST_CASE("the recommended configuration is in the tools") {
  using defaults = echo::quant::rotated<echo::quant::clipped<echo::quant::zero_aware<4, 128>, 870>>;
  const auto want = as_tuple(echo::key_of<defaults>());
  for (const auto& list : {keys<echo::tool::reference>(), keys<echo::tool::torch>(), keys<echo::tool::perf_bf16>()}) {
    bool found = false;
    for (const auto& k : list) found = found || k == want;
    CHECK(found);
  }
  bool int8 = false;
  echo::for_each_registered<echo::tool::torch | echo::tool::reference, echo::registered_compensators>(
      [&](auto e, std::size_t) {
        int8 = int8 || std::is_same<typename decltype(e)::type, echo::comp::error_feedback<echo::comp::int8_state>>::value;
      });
  CHECK(int8);
}

TEST_CASE("keys and storage names") {
  const auto none = echo::key_of<echo::quant::none>();
  CHECK(std::strcmp(none.name, "none") == 0);
  CHECK(none.bits == 0);
  CHECK(none.group == 0);
  CHECK(none.clip == 1024);
  const auto rc = echo::key_of<echo::quant::rotated<echo::quant::clipped<echo::quant::zero_aware<4, 64>, 870>>>();
  CHECK(std::strcmp(rc.name, "zero_aware") == 0);
  CHECK(rc.bits == 4);
  CHECK(rc.group == 64);
  CHECK(rc.rotate);
  CHECK(rc.clip == 870);
  CHECK(std::strcmp(echo::storage_name<echo::comp::none>(), "") == 0);
  CHECK(std::strcmp(echo::storage_name<echo::comp::error_feedback<float>>(), "float") == 0);
  CHECK(std::strcmp(echo::storage_name<echo::comp::error_feedback<echo::bfloat16_t>>(), "bf16") == 0);
  CHECK(std::strcmp(echo::storage_name<echo::comp::error_feedback<echo::comp::step8_state>>(), "step8") == 0);
}
