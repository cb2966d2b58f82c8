// A collective constructor's failures, made collective: a step that fails on one rank only (a
// cudaMalloc refused, a handle that does not open, a bad argument) is held until the next
// exchange, where every rank learns of it and every rank throws.
//
// Why: Echo's constructors exchange setup bytes through the communicator (all-gathers). A rank
// that threw on its own left its peers waiting in the next exchange: for as long as the local
// communicator's timeout, and forever through a user callback or NCCL (an adversarial review,
// 2026-12-01; docs/fault-matrix.md). With this, a constructor throws on every rank or on none.
//
// Contract: every rank makes the same sequence of all_gather() / agree() calls (exchanges run
// even after a failure; local steps after a failure are skipped). Never run a collective step
// (an exchange, or an object whose constructor exchanges) inside local(): one that threw on every
// rank would be held and the ranks would then disagree on the next exchange.
#pragma once

#include "../communicator.cuh"
#include "../error.cuh"

#include <exception>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace echo::detail {

class collective_setup {
 public:
  collective_setup(const communicator& comm, const char* call) : comm_(comm), call_(call) {}

  /// Run a local step unless an earlier one failed; what it throws is held for the next exchange.
  template <class F>
  void local(F&& step) {
    if (failure_) return;
    try {
      std::forward<F>(step)();
    } catch (...) {
      failure_ = std::current_exception();
    }
  }

  bool failed() const { return static_cast<bool>(failure_); }

  /// Collective: every rank's value, once no rank has failed. If any has, every rank throws: the
  /// failing rank its own error, the others an echo::error naming the first failing rank.
  template <class T>
  std::vector<T> all_gather(const T& mine) {
    static_assert(std::is_trivially_copyable<T>::value, "setup bytes travel as bytes");
    struct wire {
      T value;
      uint32_t failed;
    };
    wire w{};
    w.value = mine;
    w.failed = failure_ ? 1u : 0u;
    const std::vector<wire> all = comm_.all_gather(w);
    if (failure_) std::rethrow_exception(failure_);
    std::vector<T> out;
    out.reserve(all.size());
    for (size_t r = 0; r < all.size(); ++r) {
      if (all[r].failed)
        throw ::echo::error(call_, "rank " + std::to_string(r) + " failed to set up (its own error says why)", __FILE__,
                            __LINE__);
      out.push_back(all[r].value);
    }
    return out;
  }

  /// Collective: throw on every rank if any rank's local steps failed.
  void agree() { (void)all_gather(uint32_t{0}); }

 private:
  const communicator& comm_;
  const char* call_;
  std::exception_ptr failure_;
};

}  // namespace echo::detail
