// Shared machinery of the GPU tests: local communicators, device buffers, random inputs, and
// comparison of device outputs with echo::reference bit for bit.
#pragma once

#include <doctest/doctest.h>
#include <echo/echo.cuh>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace echo_test {

#define ECHO_TEST_CUDA(expr) REQUIRE_MESSAGE((expr) == cudaSuccess, #expr ": ", cudaGetErrorString(cudaGetLastError()))

inline uint64_t seed() {
  static const uint64_t s = [] {
    if (const char* e = std::getenv("ECHO_TEST_SEED")) return static_cast<uint64_t>(std::strtoull(e, nullptr, 10));
    return static_cast<uint64_t>(std::random_device{}());
  }();
  return s;
}

/// Ranks of this process: every visible GPU up to `max` (tests are written for any P, run at 2).
inline std::vector<echo::communicator>& local_comms() {
  static std::vector<echo::communicator> comms = [] {
    int count = 0;
    cudaGetDeviceCount(&count);
    std::vector<int> devs;
    for (int d = 0; d < count && d < echo::communicator::max_ranks; ++d) devs.push_back(d);
    return echo::communicator::local(devs, /*with_nccl=*/false);
  }();
  return comms;
}

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
    REQUIRE(cudaMemcpy(ptr, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  std::vector<T> download(size_t count) const {
    std::vector<T> h(count);
    cudaSetDevice(device);
    REQUIRE(cudaMemcpy(h.data(), ptr, count * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return h;
  }
};

/// Random values with outliers and exact zeros: the distribution a residual stream sees.
template <class T>
std::vector<T> random_input(std::mt19937_64& rng, size_t n) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::vector<T> v(n);
  for (auto& x : v) {
    float f = nd(rng);
    const float r = u(rng);
    if (r < 0.01f) f *= 20.0f;  // outliers
    else if (r < 0.02f) f = 0.0f;
    x = echo::element_traits<T>::from_float(f);
  }
  return v;
}

template <class T>
uint32_t bits_of(T v) {
  uint32_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}

template <class T>
bool is_nan(T v) {
  const float f = echo::element_traits<T>::to_float(v);
  return f != f;
}

/// Index of the first element where a and b differ bitwise (NaN equals NaN), or -1.
template <class T>
long long first_mismatch(const std::vector<T>& a, const std::vector<T>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (bits_of(a[i]) != bits_of(b[i]) && !(is_nan(a[i]) && is_nan(b[i]))) return static_cast<long long>(i);
  return -1;
}

/// Builds one echo::all_reduce per rank collectively.
template <class AR>
std::vector<std::unique_ptr<AR>> make_all(size_t max_elements, typename AR::options opt = {}) {
  auto& comms = local_comms();
  std::vector<std::unique_ptr<AR>> ars(comms.size());
  echo::for_each_rank(comms, [&](const echo::communicator& c) {
    ars[static_cast<size_t>(c.rank())] = std::make_unique<AR>(c, max_elements, opt);
  });
  return ars;
}

/// Device outputs against echo::reference, call after call, on one chain per side.
template <class Q, class C, class T>
class reference_check {
 public:
  using AR = echo::all_reduce<Q, echo::transport::cuda_ipc, C>;
  using chain_t = typename AR::chain_type;

  /// The size dispatch would send small calls down the 16-bit path; a check of Q forces Q unless
  /// the caller sets passthrough_below_bytes itself.
  static typename AR::options forced(typename AR::options opt) {
    if (opt.passthrough_below_bytes < 0) opt.passthrough_below_bytes = 0;
    return opt;
  }

  reference_check(size_t max_elements, typename AR::options opt = {})
      : P_(static_cast<int>(local_comms().size())), ars_(make_all<AR>(max_elements, forced(opt))), ref_(P_),
        ref_chain_(P_, max_elements), rng_(seed()) {
    for (int r = 0; r < P_; ++r) {
      ECHO_TEST_CUDA(cudaSetDevice(r));
      cudaStream_t s;
      ECHO_TEST_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      streams_.push_back(s);
      if constexpr (C::enabled) chains_.push_back(std::make_unique<chain_t>(max_elements));
      in_.emplace_back(r, max_elements);
      out_.emplace_back(r, max_elements);
    }
  }
  ~reference_check() {
    for (int r = 0; r < P_; ++r) {
      cudaSetDevice(r);
      cudaStreamDestroy(streams_[static_cast<size_t>(r)]);
    }
  }

  AR& ar(int r) { return *ars_[static_cast<size_t>(r)]; }
  cudaStream_t stream(int r) { return streams_[static_cast<size_t>(r)]; }
  chain_t* chain(int r) { return C::enabled ? chains_[static_cast<size_t>(r)].get() : nullptr; }

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
      host_in[r] = random_input<T>(rng_, n);
      in_[r].upload(host_in[r]);
    }
    return host_in;
  }

  /// Launch the call on every rank (no synchronisation).
  void launch(size_t n, bool in_place = false, echo::state_update mode = echo::state_update::fused) {
    for (int r = 0; r < P_; ++r) {
      T* out = in_place ? in_[r].ptr : out_[r].ptr;
      const echo::status s = ar(r)(in_[r].ptr, out, n, stream(r), chain(r), mode);
      REQUIRE_MESSAGE(s == echo::status::success, echo::to_string(s));
    }
    if constexpr (C::enabled) {
      if (mode == echo::state_update::deferred)
        for (int r = 0; r < P_; ++r) REQUIRE(ar(r).update(in_[r].ptr, n, stream(r), *chain(r)) == echo::status::success);
    }
  }

  /// Wait for every rank, then compare with the reference.
  void finish(const std::vector<std::vector<T>>& host_in, size_t n, bool in_place = false) {
    for (int r = 0; r < P_; ++r) {
      ECHO_TEST_CUDA(cudaSetDevice(r));
      ECHO_TEST_CUDA(cudaStreamSynchronize(stream(r)));
      REQUIRE(ar(r).check() == echo::status::success);
    }
    expect_reference(host_in, n, in_place);
  }

  /// Compare the device outputs (already computed from host_in) with the reference.
  void expect_reference(const std::vector<std::vector<T>>& host_in, size_t n, bool in_place = false) {
    std::vector<std::vector<T>> want(static_cast<size_t>(P_), std::vector<T>(n));
    std::vector<const T*> ri;
    std::vector<T*> ro;
    for (int r = 0; r < P_; ++r) {
      ri.push_back(host_in[r].data());
      ro.push_back(want[r].data());
    }
    if constexpr (C::enabled) ref_(ri, ro, n, &ref_chain_);
    else ref_(ri, ro, n);
    for (int r = 0; r < P_; ++r) {
      const std::vector<T> got = (in_place ? in_[r] : out_[r]).download(n);
      const long long bad = first_mismatch(got, want[r]);
      INFO("rank " << r << " n " << n << " seed " << seed() << " quant " << Q::name << " comp " << C::name);
      if (bad >= 0)
        INFO("first mismatch at " << bad << ": device " << echo::element_traits<T>::to_float(got[bad]) << " reference "
                                  << echo::element_traits<T>::to_float(want[r][bad]));
      REQUIRE(bad == -1);
    }
  }

  device_buffer<T>& in(int r) { return in_[static_cast<size_t>(r)]; }
  device_buffer<T>& out(int r) { return out_[static_cast<size_t>(r)]; }
  std::mt19937_64& rng() { return rng_; }
  int ranks() const { return P_; }
  echo::reference::chain_state<C>& ref_chain() { return ref_chain_; }

 private:
  int P_;
  std::vector<std::unique_ptr<AR>> ars_;
  echo::reference::all_reduce<Q, C> ref_;
  echo::reference::chain_state<C> ref_chain_;
  std::mt19937_64 rng_;
  std::vector<cudaStream_t> streams_;
  std::vector<std::unique_ptr<chain_t>> chains_;
  std::vector<device_buffer<T>> in_, out_;
};

}  // namespace echo_test
