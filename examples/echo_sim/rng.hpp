// echo-sim's random numbers: xoshiro256** seeded through splitmix64, and a 128-box ziggurat for
// N(0, 1). Its own generator (not <random>) so that the weights and tokens, hence every number
// echo-sim prints, are the same on every platform and standard library.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace echo_sim {

inline uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

class normal_rng {
 public:
  /// A stream keyed by (seed, stream, index): independent streams for weights and tokens.
  normal_rng(uint64_t seed, uint64_t stream, uint64_t index) {
    uint64_t x = seed;
    x ^= splitmix64(x) + stream * 0xD1B54A32D192ED03ull;
    x ^= splitmix64(x) + index * 0x8CB92BA72F3D8DD7ull;
    for (auto& w : s_) w = splitmix64(x);
  }

  /// x[k] = scale * (an N(0, 1) sample), rounded to fp32.
  void fill(float* x, size_t n, double scale) {
    const tables& T = tab();
    uint64_t st[4] = {s_[0], s_[1], s_[2], s_[3]};  // a local copy stays in registers
    for (size_t k = 0; k < n; ++k) x[k] = static_cast<float>(scale * normal(T, st));
    std::memcpy(s_, st, sizeof st);
  }

 private:
  struct tables;
  /// xoshiro256** (Blackman & Vigna).
  __attribute__((always_inline)) static uint64_t step(uint64_t* s) {
    const uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
  }
  static double to_unit(uint64_t u) { return static_cast<double>(u >> 11) * 0x1.0p-53; }

  /// Marsaglia & Tsang's ziggurat with 128 boxes; box index, sign and uniform use disjoint bits.
  __attribute__((always_inline)) static double normal(const tables& T, uint64_t* s) {
    for (;;) {
      const uint64_t u = step(s);
      const int i = static_cast<int>(u & 127u);
      const uint64_t sign = (u << 56) & 0x8000000000000000ull;  // bit 7 (a random sign, no branch)
      const double z = to_unit(u) * T.x[i];
      if (__builtin_expect(z < T.x[i + 1], 1)) return with_sign(z, sign);  // the box's core (~99%)
      if (i == 0) {  // the base strip beyond r: Marsaglia's tail method
        double a, b;
        do {
          a = -std::log1p(-to_unit(step(s))) / T.r;
          b = -std::log1p(-to_unit(step(s)));
        } while (b + b < a * a);
        return with_sign(T.r + a, sign);
      }
      if (T.f[i] + to_unit(step(s)) * (T.f[i + 1] - T.f[i]) < std::exp(-0.5 * z * z)) return with_sign(z, sign);
    }
  }

  struct tables {
    static constexpr double r = 3.442619855899;       // start of the tail for 128 boxes
    static constexpr double v = 9.91256303526217e-3;  // area of each box
    double x[129];  // x[0] = v / f(r) (base strip width), x[1] = r > x[2] > ... > x[128] = 0
    double f[129];  // f(x[i]) = exp(-x[i]^2 / 2)
    tables() {
      const auto fn = [](double t) { return std::exp(-0.5 * t * t); };
      x[0] = v / fn(r);
      x[1] = r;
      for (int i = 1; i < 127; ++i) x[i + 1] = std::sqrt(-2.0 * std::log(v / x[i] + fn(x[i])));
      x[128] = 0.0;
      for (int i = 0; i <= 128; ++i) f[i] = fn(x[i]);
      f[0] = fn(r);  // unused: box 0 never takes the wedge path
    }
  };
  static const tables& tab() {
    static const tables t;
    return t;
  }
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  static double with_sign(double x, uint64_t sign) {  // x >= 0
    uint64_t b;
    std::memcpy(&b, &x, sizeof b);
    b |= sign;
    std::memcpy(&x, &b, sizeof b);
    return x;
  }
  uint64_t s_[4];
};

}  // namespace echo_sim
