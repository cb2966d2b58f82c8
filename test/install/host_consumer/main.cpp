// Uses the installed Echo headers: a 4-bit zero-aware all-reduce over 3 simulated ranks.
#include <echo/echo.cuh>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  constexpr int P = 3;
  constexpr size_t n = 1000;
  std::vector<std::vector<float>> x(P, std::vector<float>(n)), y(P, std::vector<float>(n));
  std::vector<const float*> in;
  std::vector<float*> out;
  for (int r = 0; r < P; ++r) {
    for (size_t k = 0; k < n; ++k) x[r][k] = std::sin(0.01f * static_cast<float>(k) + static_cast<float>(r));
    in.push_back(x[r].data());
    out.push_back(y[r].data());
  }

  echo::reference::all_reduce<echo::quant::zero_aware<4, 128>> ar(P);
  ar(in, out, n);

  // Every rank holds the same values, close to the exact sum. Bound: each of the 2 receipts a
  // segment owner sums is off by at most half a step of a range <= 2 (2/15/2 each), the sum by
  // half a step of a range <= 6 (6/15/2): 0.34 in all.
  double worst = 0.0;
  for (size_t k = 0; k < n; ++k) {
    double exact = 0.0;
    for (int r = 0; r < P; ++r) exact += x[r][k];
    for (int r = 1; r < P; ++r)
      if (y[r][k] != y[0][k]) {
        std::printf("FAIL: rank %d differs from rank 0 at %zu\n", r, k);
        return 1;
      }
    worst = std::fmax(worst, std::fabs(y[0][k] - exact));
  }
  if (!(worst < 0.5)) {
    std::printf("FAIL: worst error %g\n", worst);
    return 1;
  }
  std::printf("echo %d.%d.%d consumer: ok (worst error %.4f)\n", ECHO_VERSION_MAJOR, ECHO_VERSION_MINOR,
              ECHO_VERSION_PATCH, worst);
  return 0;
}
