// tile_codec's statistics of a lane taken two 16-bit values at a time (min.NaN / max.NaN on
// bf16x2 and f16x2) against the same statistics on the values widened to fp32, which is what the
// reference's per-value min / max computes. Equal means equal as numbers, or both NaN: read
// literally, PTX lets the 16-bit instructions return either operand of a tie of -0 and +0, and no
// quantizer's output would see the difference (a zero extreme fits the same step and codes; only
// zero_aware's and naive_zero_point's wire zero point can carry the sign, and no decode reads
// it), so the test counts such cases rather than failing on them (on H200: none, 2026-12-01).
// The all-reduce tests check outputs against the reference.
#include "support/gpu_harness.cuh"

#include <echo/collective/group_transform.cuh>
#include <echo/collective/tile_codec.cuh>
#include <echo/quant/rotated.cuh>

#include <cstring>

namespace {

struct pair_counts {
  unsigned long long wrong;      // a min or max that differs as a number, or NaN on one side only
  unsigned long long zero_sign;  // equal, but zeros of different signs
  unsigned int first_a, first_b;
};

__device__ bool same_number(float got, float want) { return (got != got && want != want) || got == want; }

template <class T>
__device__ float widen16(uint32_t pair, int half) {
  return echo::element_traits<T>::to_float(T{static_cast<uint16_t>(half ? pair >> 16 : pair & 0xFFFFu)});
}

/// Every (a, b) of 16-bit patterns: k = a << 16 | b for k in [0, 2^32), two pairs a thread-step
/// ((a, b) and (a, b + 1) in the low and high halves).
template <class T>
__global__ void every_pair(pair_counts* out) {
  namespace cd = echo::collective::detail;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t j = blockIdx.x * blockDim.x + threadIdx.x; j < (1ull << 31); j += stride) {
    const uint32_t k = static_cast<uint32_t>(j * 2), a = k >> 16, b = k & 0xFFFFu;
    const uint32_t A = a | (a << 16), B = b | ((b + 1) << 16);
    const uint32_t mn = cd::pair_extreme_nan<T, false>(A, B), mx = cd::pair_extreme_nan<T, true>(A, B);
    for (int h = 0; h < 2; ++h) {
      const float x = widen16<T>(A, h), y = widen16<T>(B, h);
      const float lo = widen16<T>(mn, h), hi = widen16<T>(mx, h);
      const float want_lo = cd::fmin_nan(x, y), want_hi = cd::fmax_nan(x, y);
      if (!same_number(lo, want_lo) || !same_number(hi, want_hi)) {
        if (atomicAdd(&out->wrong, 1ull) == 0) out->first_a = a, out->first_b = b + h;
      } else if (signbit(lo) != signbit(want_lo) || signbit(hi) != signbit(want_hi)) {
        atomicAdd(&out->zero_sign, 1ull);
      }
    }
  }
}

template <class T>
void check_every_pair(const char* name) {
  INFO(name);
  echo_test::device_buffer<pair_counts> c(0, 1);
  REQUIRE(cudaMemset(c.ptr, 0, sizeof(pair_counts)) == cudaSuccess);
  every_pair<T><<<1024, 256>>>(c.ptr);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  pair_counts h{};
  REQUIRE(cudaMemcpy(&h, c.ptr, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess);
  INFO("first wrong pair: 0x" << std::hex << h.first_a << ", 0x" << h.first_b);
  CHECK(h.wrong == 0);
  MESSAGE(name << ": 2^32 pairs, " << h.zero_sign << " differ only in the sign of a zero result");
}

/// Each lane: range(raw run, widened, V) and range(widened, V) of its V values.
template <class Codec, class T>
__global__ void lane_ranges(const T* in, size_t lanes, float* got, float* want) {
  constexpr int V = Codec::V;
  const size_t l = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (l >= lanes) return;
  const auto raw = echo::detail::load_raw<T, V>(in + l * V, V);
  float x[V];
  echo::detail::widen(raw, x);
  const auto p = Codec::range(raw, x, V), f = Codec::range(x, V);
  got[2 * l] = p.lo, got[2 * l + 1] = p.hi, want[2 * l] = f.lo, want[2 * l + 1] = f.hi;
}

uint16_t pick16(echo_test::rng& r, bool bf16, int regime) {
  const uint16_t nan = bf16 ? 0x7FC0 : 0x7E00, inf = bf16 ? 0x7F80 : 0x7C00, top = bf16 ? 0x7F7F : 0x7BFF;
  const uint16_t sign = r.coin() ? 0x8000 : 0;
  switch (regime) {
    case 0: return static_cast<uint16_t>(r.bits32());                          // any pattern
    case 1: return sign | static_cast<uint16_t>(r.uniform_int<int>(0, 3));    // zeros, tiny subnormals
    case 2: return sign | (r.coin(0.9) ? static_cast<uint16_t>(r.uniform_int<int>(0, 0x7F)) : inf);
    case 3: return sign | (r.coin(0.95) ? static_cast<uint16_t>(r.uniform_int<int>(0x3000, 0x4000)) : nan);
    case 4: return sign | static_cast<uint16_t>(top - r.uniform_int<int>(0, 2));
    default: return 0x8000;  // -0 only
  }
}

template <class Codec, class T>
void check_lane_ranges(const char* name) {
  ECHO_TEST_RNG(r);
  INFO(name);
  constexpr int V = Codec::V;
  constexpr bool bf16 = std::is_same<T, echo::bfloat16_t>::value;
  const size_t lanes = 40000;
  std::vector<T> h(lanes * V);
  for (size_t l = 0; l < lanes; ++l) {
    const int regime = r.uniform_int<int>(0, 5), other = r.uniform_int<int>(0, 5);
    for (int i = 0; i < V; ++i) h[l * V + i].bits = pick16(r, bf16, r.coin(0.8) ? regime : other);
  }
  echo_test::device_buffer<T> in(0, h.size());
  in.upload(h);
  echo_test::device_buffer<float> got(0, 2 * lanes), want(0, 2 * lanes);
  lane_ranges<Codec, T><<<static_cast<unsigned>((lanes + 127) / 128), 128>>>(in.ptr, lanes, got.ptr, want.ptr);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  std::vector<float> g(2 * lanes), w(2 * lanes);
  REQUIRE(cudaMemcpy(g.data(), got.ptr, g.size() * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  REQUIRE(cudaMemcpy(w.data(), want.ptr, w.size() * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  size_t wrong = 0, first = 0;
  for (size_t i = 0; i < g.size(); ++i)
    if (!((std::isnan(g[i]) && std::isnan(w[i])) || g[i] == w[i]) && wrong++ == 0) first = i;
  INFO("first wrong lane " << first / 2 << (first % 2 ? " (max)" : " (min)") << ": " << g[first] << " against " << w[first]);
  CHECK(wrong == 0);
}

/// Each thread: put_codes of its N biased codes, and get_codes of its N-code words.
template <class pk, int N>
__global__ void codes_roundtrip(const uint32_t* codes, const uint32_t* words_in, size_t runs, uint32_t* words_out,
                                uint32_t* codes_out) {
  constexpr int W = N * pk::bits / 32;
  const size_t t = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (t >= runs) return;
  uint32_t c[N], w[W] = {};
  for (int i = 0; i < N; ++i) c[i] = codes[t * N + i];
  pk::put_codes(w, c);
  for (int k = 0; k < W; ++k) words_out[t * W + k] = w[k];
  for (int k = 0; k < W; ++k) w[k] = words_in[t * W + k];
  pk::get_codes(w, c);
  for (int i = 0; i < N; ++i) codes_out[t * N + i] = c[i];
}

/// The device's put_codes / get_codes (4-bit: byte permutes) against the host's put_code /
/// get_code, which the reference's packets use: random biased codes in range, random words.
template <class Q, int N>
void check_codes(const char* name) {
  ECHO_TEST_RNG(r);
  INFO(name);
  using pk = echo::quant::packet<Q>;
  constexpr int W = N * Q::bits / 32;
  const size_t runs = 20000;
  std::vector<uint32_t> codes(runs * N), words(runs * W), want_words(runs * W, 0u), want_codes(runs * N);
  for (auto& c : codes) c = echo::detail::biased(r.uniform_int<uint32_t>(0, Q::max_code));
  for (auto& w : words) w = r.bits32();
  for (size_t t = 0; t < runs; ++t)
    for (int i = 0; i < N; ++i) {
      pk::put_code(&want_words[t * W], i, codes[t * N + i]);
      want_codes[t * N + i] = pk::get_code(&words[t * W], i);
    }
  echo_test::device_buffer<uint32_t> c(0, codes.size()), w(0, words.size()), wo(0, words.size()), co(0, codes.size());
  c.upload(codes);
  w.upload(words);
  codes_roundtrip<pk, N><<<static_cast<unsigned>((runs + 127) / 128), 128>>>(c.ptr, w.ptr, runs, wo.ptr, co.ptr);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  std::vector<uint32_t> got_words(words.size()), got_codes(codes.size());
  REQUIRE(cudaMemcpy(got_words.data(), wo.ptr, got_words.size() * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
  REQUIRE(cudaMemcpy(got_codes.data(), co.ptr, got_codes.size() * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(got_words == want_words);
  CHECK(got_codes == want_codes);
}

/// Warp w dequantizes sub-tile packet w (lane t its share) into out[(w * 32 + t) * V ...].
template <class Codec>
__global__ void load_packets(const unsigned char* packets, size_t bytes, size_t warps, float* out) {
  constexpr int V = Codec::V;
  const size_t w = (blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x) / 32;
  const int t = threadIdx.x % 32;
  if (w >= warps) return;
  float v[V];
  Codec::load(packets + w * bytes, t, v);
  for (int i = 0; i < V; ++i) out[(w * 32 + t) * V + i] = v[i];
}

/// tile_codec::load against the policy's own decode (the host's, as the reference runs it) on
/// random packets: random codes, zero points and fp16 scales (subnormal, up to the largest, 0,
/// NaN). A scale of 0 gets codes equal to the zero's (all an encode makes then), compared as
/// numbers: -0 and +0 are the one difference the 4-bit affine decode allows (tile_codec::load).
template <class Q, class T, int LaneValues>
void check_load(const char* name) {
  ECHO_TEST_RNG(r);
  INFO(name);
  using codec = echo::collective::tile_codec<Q, T, LaneValues>;
  using pk = echo::quant::packet<Q>;
  constexpr int V = codec::V, G = 32 / codec::LANES;
  const size_t bytes = codec::sub_tile_bytes(), warps = 3000;
  std::vector<unsigned char> h(bytes * warps, 0);
  std::vector<float> want(warps * 32 * V);
  std::vector<bool> zero_scale(want.size(), false);
  for (size_t w = 0; w < warps; ++w) {
    unsigned char* packet = h.data() + w * bytes;
    for (int g = 0; g < G; ++g) {
      const int kind = r.uniform_int<int>(0, 9);
      uint16_t s = static_cast<uint16_t>(r.uniform_int<int>(1, 0x7BFF));  // positive finite fp16
      if (kind == 0) s = 0;
      if (kind == 1) s = echo::detail::half_nan;
      if (kind == 2) s = static_cast<uint16_t>(r.uniform_int<int>(1, 0x3FF));  // subnormal
      if (kind == 3) s = 0x7BFF;
      const uint32_t z = r.uniform_int<uint32_t>(0, Q::max_code);
      echo::quant::wire_params wp{s, static_cast<uint16_t>(std::is_same<Q, echo::quant::zero_aware<Q::bits, Q::group>>::value
                                                                 ? echo::detail::float_to_half_bits(static_cast<float>(z))
                                                                 : 0)};
      const echo::quant::group_params p = Q::unpack(wp);
      const uint32_t zero_code = static_cast<uint32_t>(p.bias - echo::detail::code_magic);
      uint32_t words[pk::code_words] = {};
      for (int i = 0; i < Q::group; ++i)
        pk::put_code(words, i, echo::detail::biased(s == 0 ? zero_code : r.uniform_int<uint32_t>(0, Q::max_code)));
      std::memcpy(packet + pk::code_offset(g), words, sizeof words);
      std::memcpy(packet + pk::param_offset(G, g), &wp, 4);
      for (int i = 0; i < Q::group; ++i) {
        const size_t t = static_cast<size_t>(g) * codec::LANES + i / V, at = (w * 32 + t) * V + i % V;
        want[at] = Q::decode(pk::get_code(words, i), p);
        zero_scale[at] = s == 0;
      }
    }
  }
  echo_test::device_buffer<unsigned char> in(0, h.size());
  in.upload(h);
  echo_test::device_buffer<float> out(0, want.size());
  load_packets<codec><<<static_cast<unsigned>((warps * 32 + 127) / 128), 128>>>(in.ptr, bytes, warps, out.ptr);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  std::vector<float> got(want.size());
  REQUIRE(cudaMemcpy(got.data(), out.ptr, got.size() * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  size_t wrong = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const bool ok = (std::isnan(got[i]) && std::isnan(want[i])) ||
                    (zero_scale[i] ? got[i] == want[i] : std::memcmp(&got[i], &want[i], 4) == 0);
    if (!ok && wrong++ == 0) first = i;
  }
  INFO("first wrong value " << first << ": " << got[first] << " against " << want[first]);
  CHECK(wrong == 0);
}

/// Warp w transforms groups w * (32 / LANES) .. of x in place: forward, or inverse of x / G. Lanes
/// past the last group hold sentinels and are not whole: `changed` counts the values they lost.
template <class Q, int V>
__global__ void transform_groups(float* x, size_t groups, bool inverse, unsigned* changed) {
  using tr = echo::collective::group_transform<echo::quant::rotated<Q>, V>;
  constexpr int LANES = Q::group / V;
  const int lane = threadIdx.x & 31;
  const size_t warp = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const size_t g = warp * (32 / LANES) + lane / LANES;
  const bool whole = g < groups;
  float v[V];
  float* at = x + g * Q::group + (lane % LANES) * V;
  for (int i = 0; i < V; ++i) v[i] = whole ? at[i] : 1000.0f + static_cast<float>(i);
  if (inverse) {
    if (whole)
      for (int i = 0; i < V; ++i) v[i] = echo::detail::mul_rn(v[i], tr::H::inv_size);
    tr::inverse_scaled(v, lane, whole);
  } else {
    tr::forward(v, lane, whole);
  }
  for (int i = 0; i < V; ++i) {
    if (whole) at[i] = v[i];
    else if (v[i] != 1000.0f + static_cast<float>(i)) atomicAdd(changed, 1u);
  }
}

/// The device's group transform, spread over lanes of V values, equals quant::hadamard on the host
/// bit for bit, forward and inverse, on random groups (with zeros, signed zeros, a huge outlier).
template <class Q, int V>
void check_transform(const char* name) {
  INFO(name);
  using H = typename echo::quant::rotated<Q>::transform;
  const size_t groups = 4093, n = groups * Q::group;  // a last warp with lanes beyond the groups: not whole
  echo_test::rng r(echo_test::seed());
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = r.normal() * std::ldexp(1.0f, r.uniform_int<int>(-20, 20));
    if (i % 97 == 0) x[i] = r.coin() ? 0.0f : -0.0f;
    if (i % 1031 == 0) x[i] *= 1e6f;
  }
  for (const bool inverse : {false, true}) {
    std::vector<float> want = x;
    for (size_t g = 0; g < groups; ++g) {
      float* at = want.data() + g * Q::group;
      if (inverse) {
        for (int i = 0; i < Q::group; ++i) at[i] = echo::detail::mul_rn(at[i], H::inv_size);
        H::inverse_scaled(at);
      } else {
        H::forward(at);
      }
    }
    echo_test::device_buffer<float> d(0, n);
    d.upload(x);
    echo_test::device_buffer<unsigned> changed(0, 1);
    changed.upload(std::vector<unsigned>{0u});
    const size_t warps = echo::detail::ceil_div(groups, static_cast<size_t>(32 / (Q::group / V)));
    transform_groups<Q, V><<<static_cast<unsigned>((warps + 3) / 4), 128>>>(d.ptr, groups, inverse, changed.ptr);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    const std::vector<float> got = d.download(n);
    CHECK(std::memcmp(got.data(), want.data(), n * sizeof(float)) == 0);
    CHECK(changed.download(1)[0] == 0u);  // lanes whose group is not whole keep their values
  }
}

}  // namespace

TEST_CASE("tile_codec::load equals the policy's decode (the 4-bit affine path and the others)") {
  using namespace echo;
  check_load<quant::zero_aware<4, 128>, bfloat16_t, 32>("zero_aware<4, 128>, 32 values a lane");
  check_load<quant::zero_aware<4, 64>, bfloat16_t, 16>("zero_aware<4, 64>, 16 values a lane");
  check_load<quant::symmetric<4, 128>, half_t, 32>("symmetric<4, 128>, 32 values a lane");
  check_load<quant::symmetric<4, 32>, float, 16>("symmetric<4, 32>, 16 values a lane");
  check_load<quant::zero_aware<8, 128>, bfloat16_t, 16>("zero_aware<8, 128> (byte codes)");
  check_load<quant::naive_zero_point<4, 128>, bfloat16_t, 32>("naive_zero_point<4, 128> (not affine)");
}

TEST_CASE("packet::put_codes / get_codes on the device equal the host's put_code / get_code") {
  using namespace echo::quant;
  check_codes<zero_aware<4, 128>, 32>("4 bits, 32 codes");
  check_codes<zero_aware<4, 64>, 16>("4 bits, 16 codes");
  check_codes<zero_aware<8, 128>, 16>("8 bits, 16 codes");
  check_codes<zero_aware<2, 128>, 32>("2 bits, 32 codes");
  check_codes<zero_aware<3, 128>, 32>("3 bits, 32 codes");
  check_codes<zero_aware<6, 128>, 16>("6 bits, 16 codes");
}

TEST_CASE("min.NaN / max.NaN of bf16x2 and f16x2 equal fp32 min / max of the widened values, for every pair") {
  check_every_pair<echo::bfloat16_t>("bf16x2");
  check_every_pair<echo::half_t>("f16x2");
}

TEST_CASE("tile_codec::range from the loaded run equals range of the widened values") {
  using namespace echo;
  check_lane_ranges<collective::tile_codec<quant::zero_aware<4, 128>, bfloat16_t, 32>, bfloat16_t>("bf16, 32 values a lane");
  check_lane_ranges<collective::tile_codec<quant::zero_aware<4, 128>, half_t, 32>, half_t>("fp16, 32 values a lane");
  check_lane_ranges<collective::tile_codec<quant::zero_aware<8, 128>, bfloat16_t, 16>, bfloat16_t>("bf16, 16 values a lane");
  check_lane_ranges<collective::tile_codec<quant::symmetric<4, 64>, half_t, 16>, half_t>("fp16, 16 values a lane");
}

TEST_CASE("group_transform over lanes equals quant::hadamard on the host, forward and inverse") {
  using namespace echo::quant;
  check_transform<zero_aware<4, 128>, 16>("128 values, 16 a lane");
  check_transform<zero_aware<4, 128>, 32>("128 values, 32 a lane");
  check_transform<zero_aware<4, 32>, 16>("32 values, 16 a lane");
  check_transform<zero_aware<8, 64>, 16>("64 values, 16 a lane");
  check_transform<zero_aware<4, 256>, 32>("256 values, 32 a lane");
  check_transform<zero_aware<4, 256>, 16>("256 values, 16 a lane");
}
