// Shared machinery of the GPU tests: local communicators (P ranks over the visible GPUs, several
// ranks a GPU when ECHO_TEST_RANKS asks for more ranks than GPUs), one worker thread a rank,
// device buffers, and reference_check: device outputs against echo::reference bit for bit, call
// after call, for either transport. Random inputs and bit comparisons are the host tests' own
// (support/random.hpp, support/bits.hpp): one dialect for every test.
#pragma once

#include <doctest/doctest.h>
#include <echo/echo.cuh>

#include "support/bits.hpp"
#include "support/random.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <type_traits>
#include <sstream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace echo_test {

#define ECHO_TEST_CUDA(expr) REQUIRE_MESSAGE((expr) == cudaSuccess, #expr ": ", cudaGetErrorString(cudaGetLastError()))

/// The seed of this test run (ECHO_TEST_SEED replays one), printed by every failing check.
inline uint64_t seed() {
  static const uint64_t s = fresh_seed();
  return s;
}

inline int gpu_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
  (void)cudaGetLastError();
  return n;
}

/// Ranks of the tests: ECHO_TEST_RANKS if set (1..8; rank r on GPU r % gpus), else one a GPU.
inline int test_ranks() {
  const int gpus = gpu_count();
  int P = gpus < echo::transport::cuda_ipc::max_ranks ? gpus : echo::transport::cuda_ipc::max_ranks;
  if (const char* e = std::getenv("ECHO_TEST_RANKS")) P = std::atoi(e);
  const bool in_range = P >= 1 && P <= echo::transport::cuda_ipc::max_ranks;
  REQUIRE_MESSAGE(in_range, "ECHO_TEST_RANKS out of range");
  return P;
}

inline std::vector<int> rank_devices(int P) {
  const int gpus = gpu_count();
  std::vector<int> d;
  for (int r = 0; r < P; ++r) d.push_back(r % gpus);
  return d;
}

/// Communicators of the test ranks without NCCL (transport::cuda_ipc).
inline std::vector<echo::communicator>& local_comms() {
  static std::vector<echo::communicator> comms = echo::communicator::local(rank_devices(test_ranks()), false);
  return comms;
}

/// Communicators with NCCL (transport::nccl); NCCL refuses two ranks on one GPU, so only when
/// every rank has its own GPU (else nullptr: such tests report themselves skipped).
inline std::vector<echo::communicator>* nccl_comms() {
  static std::unique_ptr<std::vector<echo::communicator>> comms = []() -> std::unique_ptr<std::vector<echo::communicator>> {
    const int P = test_ranks();
    if (P > gpu_count()) return nullptr;
    return std::make_unique<std::vector<echo::communicator>>(echo::communicator::local(rank_devices(P), true));
  }();
  return comms.get();
}

template <class Transport>
std::vector<echo::communicator>* comms_for() {
  if constexpr (std::is_same<Transport, echo::transport::nccl::tag>::value) return nccl_comms();
  else return &local_comms();
}

/// One persistent worker thread a rank: run(f) calls f(r) on every rank's thread at once and
/// waits for all (transport::nccl needs a thread a rank; cuda_ipc does not mind).
class rank_pool {
 public:
  explicit rank_pool(int P) : P_(P), devices_(rank_devices(P)) {
    for (int r = 0; r < P; ++r) threads_.emplace_back([this, r] { loop(r); });
  }
  ~rank_pool() {
    {
      std::lock_guard<std::mutex> lk(m_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  void run(const std::function<void(int)>& f) {
    std::unique_lock<std::mutex> lk(m_);
    job_ = &f;
    left_ = P_;
    ++generation_;
    cv_.notify_all();
    done_.wait(lk, [&] { return left_ == 0; });
    job_ = nullptr;
  }

 private:
  void loop(int r) {
    uint64_t seen = 0;
    for (;;) {
      const std::function<void(int)>* job;
      {
        std::unique_lock<std::mutex> lk(m_);
        cv_.wait(lk, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        job = job_;
      }
      cudaSetDevice(devices_[static_cast<size_t>(r)]);
      (*job)(r);
      std::lock_guard<std::mutex> lk(m_);
      if (--left_ == 0) done_.notify_all();
    }
  }
  int P_;
  std::vector<int> devices_;
  std::vector<std::thread> threads_;
  std::mutex m_;
  std::condition_variable cv_, done_;
  const std::function<void(int)>* job_ = nullptr;
  int left_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

template <class T>
struct device_buffer {
  T* ptr = nullptr;
  size_t n = 0;
  int device = 0;
  device_buffer() = default;
  device_buffer(int dev, size_t count) : n(count), device(dev) {
    cudaSetDevice(dev);
    REQUIRE(cudaMalloc(&ptr, std::max<size_t>(1, n) * sizeof(T)) == cudaSuccess);
  }
  device_buffer(device_buffer&& o) noexcept : ptr(o.ptr), n(o.n), device(o.device) { o.ptr = nullptr; }
  device_buffer& operator=(device_buffer&& o) noexcept {
    std::swap(ptr, o.ptr);
    std::swap(n, o.n);
    std::swap(device, o.device);
    return *this;
  }
  ~device_buffer() {
    if (ptr) {
      cudaSetDevice(device);
      cudaFree(ptr);
    }
  }
  void upload(const std::vector<T>& h) {
    cudaSetDevice(device);
    // done on return: a pageable cudaMemcpy may not be, and the tests' streams are non-blocking
    REQUIRE(echo::detail::write_device_now(ptr, h.data(), h.size() * sizeof(T)) == cudaSuccess);
  }
  std::vector<T> download(size_t count) const {
    std::vector<T> h(count);
    cudaSetDevice(device);
    REQUIRE(cudaMemcpy(h.data(), ptr, count * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return h;
  }
};

/// Index of the first element where a and b differ (same_bits: NaN equals NaN), or -1.
template <class T>
long long first_mismatch(const std::vector<T>& a, const std::vector<T>& b) {
  const size_t k = first_difference(a.data(), b.data(), std::min(a.size(), b.size()));
  return k == std::min(a.size(), b.size()) && a.size() == b.size() ? -1 : static_cast<long long>(k);
}

/// REQUIRE that the device's values are the reference's bit for bit; a mismatch names its index
/// and both values (the caller's INFO says what was compared).
template <class T>
void require_same_bits(const std::vector<T>& got, const std::vector<T>& want) {
  const long long bad = first_mismatch(got, want);
  std::ostringstream where;  // built outside the if: an INFO lives only to the end of its scope
  if (bad >= 0) where << "first mismatch at " << bad << ": device " << widen(got[bad]) << " reference " << widen(want[bad]);
  INFO(where.str());
  REQUIRE(bad == -1);
}

/// Builds one echo::all_reduce per rank collectively (nullptr-free: the test skips a transport
/// that cannot run at this P before it gets here).
template <class AR, class Transport = echo::transport::cuda_ipc::tag, class OptionsOf>
std::vector<std::unique_ptr<AR>> make_each(size_t max_elements, OptionsOf options_of) {
  auto& comms = *comms_for<Transport>();
  std::vector<std::unique_ptr<AR>> ars(comms.size());
  echo::for_each_rank(comms, [&](const echo::communicator& c) {
    ars[static_cast<size_t>(c.rank())] = std::make_unique<AR>(c, max_elements, options_of(c.rank()));
  });
  return ars;
}

/// The same with one options for every rank.
template <class AR, class Transport = echo::transport::cuda_ipc::tag>
std::vector<std::unique_ptr<AR>> make_all(size_t max_elements, typename AR::options opt = {}) {
  return make_each<AR, Transport>(max_elements, [&](int) { return opt; });
}

/// Builds an AR on every rank of comms while device memory is taken so that some ranks' workspace
/// allocation is refused and at least one rank's succeeds: on a GPU its ranks share, room for
/// one workspace and a half is left; else the GPU of rank 1 keeps half a workspace (its ranks are
/// refused). Every rank must throw at once (none waiting for a peer that gave up: the
/// communicator's 120 s timeout says "arrive"), the refused ranks their cudaMalloc error, the
/// others "rank r failed to set up"; and no rank may keep what it had allocated.
template <class AR>
void check_some_ranks_refused(const std::vector<echo::communicator>& comms, size_t max_elements,
                              const typename AR::options& opt) {
  const int P = static_cast<int>(comms.size());
  size_t W = 0;  // this configuration's workspace, from a build that succeeds
  {
    std::vector<std::unique_ptr<AR>> ars(comms.size());
    echo::for_each_rank(comms, [&](const echo::communicator& c) {
      ars[static_cast<size_t>(c.rank())] = std::make_unique<AR>(c, max_elements, opt);
    });
    W = ars[0]->workspace_bytes();
  }
  REQUIRE(W >= (size_t(1) << 30));  // large against everything else a construction allocates
  std::vector<int> devices;
  for (const auto& c : comms)
    if (std::find(devices.begin(), devices.end(), c.device()) == devices.end()) devices.push_back(c.device());
  const auto free_on = [](int d) {
    size_t f = 0, t = 0;
    cudaSetDevice(d);
    REQUIRE(cudaMemGetInfo(&f, &t) == cudaSuccess);
    return f;
  };
  std::vector<size_t> before;
  for (int d : devices) before.push_back(free_on(d));
  const bool shared = comms[0].device() == comms[1].device();
  void* hog = nullptr;
  {
    const int d = comms[1].device();
    const size_t keep = shared ? W + W / 2 : W / 2, f = free_on(d);
    REQUIRE(f > keep + (size_t(1) << 30));
    REQUIRE(cudaMalloc(&hog, f - keep) == cudaSuccess);
  }
  std::vector<std::string> what(comms.size());
  const auto t0 = std::chrono::steady_clock::now();
  echo::for_each_rank(comms, [&](const echo::communicator& c) {
    try {
      AR ar(c, max_elements, opt);
    } catch (const echo::error& e) {
      what[static_cast<size_t>(c.rank())] = e.what();
    }
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  cudaSetDevice(comms[1].device());
  REQUIRE(cudaFree(hog) == cudaSuccess);
  int refused = 0, told = 0;
  for (int r = 0; r < P; ++r) {
    const std::string& w = what[static_cast<size_t>(r)];
    INFO("rank " << r << ": " << (w.empty() ? std::string("did not throw") : w));
    CHECK(!w.empty());
    CHECK(w.find("arrive") == std::string::npos);
    refused += w.find("cudaMalloc") != std::string::npos;
    told += w.find("failed to set up") != std::string::npos;
  }
  CHECK(refused >= 1);
  CHECK(told >= 1);
  CHECK(refused + told == P);
  CHECK(seconds < 20.0);
  for (size_t i = 0; i < devices.size(); ++i) {  // what the ranks had allocated is free again
    INFO("device " << devices[i]);
    CHECK(free_on(devices[i]) + W / 4 > before[i]);
  }
}

/// Whether Transport can run at this P; prints why not (the test then returns early, and
/// reports so in its output).
template <class Transport>
bool runnable() {
  if (comms_for<Transport>()) return true;
  MESSAGE("SKIPPED here: transport::nccl needs a GPU a rank (NCCL refuses two ranks on one GPU)");
  return false;
}

/// Device outputs against echo::reference, call after call, on one chain per side.
template <class Q, class C, class T, class Transport = echo::transport::cuda_ipc::tag,
          class Ops = echo::collective::all_reduce_only>
class reference_check {
 public:
  using AR = echo::all_reduce<Q, Transport, C, echo::tuning::default_policy, Ops>;
  using quantizer = Q;
  using compensator = C;
  using element = T;
  using chain_t = typename AR::chain_type;

  /// The size dispatch would send small calls down the unquantized path; a check of Q forces Q
  /// unless the caller sets unquantized_below_bytes itself.
  static typename AR::options forced(typename AR::options opt) {
    if (!opt.unquantized_below_bytes) opt.unquantized_below_bytes = 0;
    return opt;
  }

  reference_check(size_t max_elements, typename AR::options opt = {})
      : reference_check(max_elements, [opt](int) { return opt; }) {}
  /// Each rank's own options (options_of(rank)): what a rank-local option may differ in.
  template <class OptionsOf, class = std::enable_if_t<std::is_invocable<OptionsOf, int>::value>>
  reference_check(size_t max_elements, OptionsOf options_of)
      : P_(static_cast<int>(comms_for<Transport>()->size())),
        ars_(make_each<AR, Transport>(max_elements, [&](int r) { return forced(options_of(r)); })), ref_(P_),
        ref_chain_(P_, max_elements), rng_(seed()), pool_(P_) {
    const auto devs = rank_devices(P_);
    for (int r = 0; r < P_; ++r) {
      ECHO_TEST_CUDA(cudaSetDevice(devs[r]));
      cudaStream_t s;
      ECHO_TEST_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      streams_.push_back(s);
      if constexpr (C::keeps_state) chains_.push_back(std::make_unique<chain_t>(max_elements));
      in_.emplace_back(devs[r], max_elements);
      out_.emplace_back(devs[r], max_elements);
    }
  }
  ~reference_check() {
    for (int r = 0; r < P_; ++r) {
      cudaSetDevice(in_[r].device);
      cudaStreamSynchronize(streams_[static_cast<size_t>(r)]);
      cudaStreamDestroy(streams_[static_cast<size_t>(r)]);
    }
  }

  AR& ar(int r) { return *ars_[static_cast<size_t>(r)]; }
  cudaStream_t stream(int r) { return streams_[static_cast<size_t>(r)]; }
  chain_t* chain(int r) {
    if constexpr (C::keeps_state) return chains_[static_cast<size_t>(r)].get();
    else return nullptr;
  }
  rank_pool& pool() { return pool_; }

  /// One call on fresh random inputs of n elements; every rank's output must equal the
  /// reference's bit for bit.
  void step(size_t n, bool in_place = false, echo::state_update mode = echo::state_update::fused) {
    const auto host_in = upload_random(n);
    launch(n, in_place, mode);
    finish(host_in, n, in_place);
  }

  /// Fresh random inputs on every rank's input buffer; returns them.
  std::vector<std::vector<T>> upload_random(size_t n) {
    std::vector<std::vector<T>> host_in(static_cast<size_t>(P_));
    for (int r = 0; r < P_; ++r) {
      host_in[r] = random_elements<T>(rng_, n);
      in_[r].upload(host_in[r]);
    }
    return host_in;
  }

  /// Launch the call on every rank (each from its own thread; no synchronisation).
  void launch(size_t n, bool in_place = false, echo::state_update mode = echo::state_update::fused) {
    std::vector<echo::status> st(static_cast<size_t>(P_)), up(static_cast<size_t>(P_), echo::status::success);
    pool_.run([&](int r) {
      T* out = in_place ? in_[r].ptr : out_[r].ptr;
      st[r] = ar(r)(in_[r].ptr, out, n, stream(r), chain(r), mode);
    });
    // Every rank's call is queued before any rank's update: ranks that one process drives on one
    // GPU may share a hardware work queue, where an update queued ahead of a peer's call would
    // wait behind its own call, which waits for the peer's (docs/transports.md).
    if constexpr (C::keeps_state)
      if (mode == echo::state_update::deferred)
        pool_.run([&](int r) {
          if (st[r] == echo::status::success) up[r] = ar(r).update(in_[r].ptr, n, stream(r), *chain(r));
        });
    for (int r = 0; r < P_; ++r) {
      REQUIRE_MESSAGE(st[r] == echo::status::success, echo::to_string(st[r]), " (", ar(r).last_error(), ")");
      REQUIRE(up[r] == echo::status::success);
    }
  }

  /// One closing call (all_reduce::close_chain) on fresh random inputs, checked against the reference's.
  void close_step(size_t n) {
    const auto host_in = upload_random(n);
    std::vector<echo::status> st(static_cast<size_t>(P_));
    pool_.run([&](int r) { st[r] = ar(r).close_chain(in_[r].ptr, out_[r].ptr, n, stream(r), chain(r)); });
    for (int r = 0; r < P_; ++r) REQUIRE_MESSAGE(st[r] == echo::status::success, echo::to_string(st[r]), " (", ar(r).last_error(), ")");
    finish(host_in, n, false, true);
  }

  /// Wait for every rank, then compare with the reference.
  void finish(const std::vector<std::vector<T>>& host_in, size_t n, bool in_place = false, bool closes = false) {
    for (int r = 0; r < P_; ++r) {
      ECHO_TEST_CUDA(cudaSetDevice(in_[r].device));
      ECHO_TEST_CUDA(cudaStreamSynchronize(stream(r)));
      REQUIRE(ar(r).check() == echo::status::success);
    }
    expect_reference(host_in, n, in_place, closes);
  }

  /// Compare the device outputs (already computed from host_in) with the reference.
  void expect_reference(const std::vector<std::vector<T>>& host_in, size_t n, bool in_place = false, bool closes = false) {
    std::vector<std::vector<T>> want(static_cast<size_t>(P_), std::vector<T>(n));
    std::vector<const T*> ri;
    std::vector<T*> ro;
    for (int r = 0; r < P_; ++r) {
      ri.push_back(host_in[r].data());
      ro.push_back(want[r].data());
    }
    if constexpr (C::keeps_state) {
      if (closes) ref_.close_chain(ri, ro, n, &ref_chain_);  // (every call quantizes here: forced())
      else ref_(ri, ro, n, &ref_chain_);
    } else {
      ref_(ri, ro, n);
    }
    for (int r = 0; r < P_; ++r) {
      INFO("rank " << r << " of " << P_ << ", n " << n << ", seed " << seed() << ", " << Transport::name << " "
                   << Q::name << "<" << Q::bits << "," << Q::group << "> " << C::name << " " << type_name<T>());
      require_same_bits((in_place ? in_[r] : out_[r]).download(n), want[r]);
    }
  }

  device_buffer<T>& in(int r) { return in_[static_cast<size_t>(r)]; }
  device_buffer<T>& out(int r) { return out_[static_cast<size_t>(r)]; }
  rng& random() { return rng_; }
  int ranks() const { return P_; }
  echo::reference::chain_state<C>& ref_chain() { return ref_chain_; }

 private:
  int P_;
  std::vector<std::unique_ptr<AR>> ars_;
  echo::reference::all_reduce<Q, C> ref_;
  echo::reference::chain_state<C> ref_chain_;
  rng rng_;
  rank_pool pool_;
  std::vector<cudaStream_t> streams_;
  std::vector<std::unique_ptr<chain_t>> chains_;
  std::vector<device_buffer<T>> in_, out_;
};

}  // namespace echo_test
