// Helpers for driving echo::reference::all_reduce over P simulated ranks.
#pragma once

#include <echo/echo.cuh>

#include "support/bits.hpp"
#include "support/random.hpp"

#include <cstring>
#include <vector>

namespace echo_test {

/// Per-rank input and output buffers of n elements of T.
template <class T>
struct ranks_data {
  std::vector<std::vector<T>> in, out;

  ranks_data(int P, size_t n) : in(static_cast<size_t>(P), std::vector<T>(n)), out(static_cast<size_t>(P), std::vector<T>(n)) {}
  int ranks() const { return static_cast<int>(in.size()); }
  size_t size() const { return in.empty() ? 0 : in[0].size(); }

  std::vector<const T*> in_ptrs() const {
    std::vector<const T*> p;
    for (auto& v : in) p.push_back(v.data());
    return p;
  }
  std::vector<T*> out_ptrs() {
    std::vector<T*> p;
    for (auto& v : out) p.push_back(v.data());
    return p;
  }
  /// Fresh activations on every rank (rounded to T), never all zero.
  void randomize(rng& r, size_t block = 64, float lo_exp10 = -2.0f, float hi_exp10 = 1.0f) {
    for (auto& v : in) {
      const std::vector<float> x = activations(r, v.size(), block, lo_exp10, hi_exp10);
      for (size_t k = 0; k < v.size(); ++k) v[k] = narrow<T>(x[k]);
    }
  }
  /// True when every rank's output is byte-identical to rank 0's.
  bool outputs_identical() const {
    for (size_t r = 1; r < out.size(); ++r)
      if (!out[r].empty() && std::memcmp(out[r].data(), out[0].data(), out[0].size() * sizeof(T)) != 0) return false;
    return true;
  }
};

template <class T>
bool same_bytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

}  // namespace echo_test
