#include "sweep_args.hpp"

#include "sizes.hpp"

#include <cuda_runtime_api.h>
#include <unistd.h>  // getopt

#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace echo_bench {

int parse_sweep(int argc, char** argv, const char* tool, const char* usage, const char* extra, sweep_args& a,
                const std::function<bool(int, const char*)>& own) {
  const std::string letters = std::string("g:b:e:f:n:w:r:q:h") + extra;
  const auto bad = [&](int code) {
    std::fprintf(code == 0 ? stdout : stderr, "usage: %s %s\n", tool, usage);
    return code;
  };
  int c;
  try {
    while ((c = getopt(argc, argv, letters.c_str())) != -1) {
      switch (c) {
        case 'g': a.ranks = std::atoi(optarg); break;
        case 'b': a.lo = parse_size(optarg, size_t(1) << 40); break;
        case 'e': a.hi = parse_size(optarg, size_t(1) << 40); break;
        case 'f': a.factor = static_cast<size_t>(std::atoi(optarg)); break;
        case 'n': a.iters = std::atoi(optarg); break;
        case 'w': a.warmup = std::atoi(optarg); break;
        case 'r': a.rounds = std::atoi(optarg); break;
        case 'q': a.quant = optarg; break;
        case 'h':
          bad(0);
          return -1;
        default:
          if (c == '?' || !own || !own(c, optarg)) return bad(2);
      }
    }
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "%s: %s\n", tool, e.what());
    return bad(2);
  }
  if (a.ranks < 2 || a.iters < 1 || a.warmup < 0 || a.rounds < 1 || a.lo == 0 || a.hi < a.lo) {
    std::fprintf(stderr, "%s: bad flags\n", tool);
    return bad(2);
  }
  return 0;
}

int gpus_or_skip(const char* tool) {
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus < 1) {
    std::printf("%s: no GPU (skipped)\n", tool);
    return 0;
  }
  return gpus;
}

}  // namespace echo_bench
