// How far behind its producer may a ring's consumer run before the ring's bytes reach HBM?
//
// A stand-in for the all-reduce's packet rings on one GPU, without quantization math: producer
// warps read bf16 x (2 B a value) and write a 0.5 B packet a value (each value's top nibble) into
// slot `chunk mod R` of a ring; consumer warps wait for that slot's flag, read the packet and write
// bf16 y (2 B a value), then free the slot. Each block has as many producer as consumer warps,
// pair p of the grid handles chunks p, p + pairs, ...; a slot is reused by its own pair only, after
// its consumer freed it. The ring's size R sets how many bytes of other traffic stream through L2
// between a packet's write and its read (and inband_kernel: flags inside the packet's lines). Prints the time a 1 GiB x takes for several ring sizes
// and, beside it, a fused pass (x -> y, no ring) and cudaMemcpy of x; run it under ncu for the
// HBM bytes (dram__bytes_read.sum, dram__bytes_write.sum): with the ring in L2 they are 4 B a
// value, with the ring in HBM 5.
//
//   cmake --build build --target echo_ring_l2_probe    (or: nvcc -O3 -arch=sm_90 -std=c++17 -o p ring_l2_probe.cu)
//   build/benchmark/echo-ring-l2-probe [MiB of x, default 1024]      (RING_PROBE_REPS=1 under ncu: one timed launch a pass)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define ECHO_PROBE_CHECK(x)                                                                   \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s: %s (%s:%d)\n", #x, cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

constexpr int V = 32;                 // values a lane
constexpr int CHUNK = 32 * V;         // values a warp's chunk
constexpr int PACKET = CHUNK / 2;     // bytes of a chunk's packet (4 bits a value)

__device__ __forceinline__ unsigned ld_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release(unsigned* p, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// A lane's 32 bf16 values (4 x 16 B) as 32 nibbles (16 B): each value's top nibble; and back.
__device__ __forceinline__ uint4 encode(const uint4* src) {
  uint4 code;
  unsigned* cw = reinterpret_cast<unsigned*>(&code);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint4 v = src[i];
    const unsigned a[4] = {v.x, v.y, v.z, v.w};
    unsigned word = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) word |= ((a[j] >> 12) & 0xFu) << (8 * j) | ((a[j] >> 28) & 0xFu) << (8 * j + 4);
    cw[i] = word;
  }
  return code;
}
__device__ __forceinline__ void decode(const uint4& code, uint4* dst) {
  const unsigned cw[4] = {code.x, code.y, code.z, code.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    unsigned o[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) o[j] = ((cw[i] >> (8 * j)) & 0xFu) << 12 | ((cw[i] >> (8 * j + 4)) & 0xFu) << 28;
    dst[i] = make_uint4(o[0], o[1], o[2], o[3]);
  }
}

// In-band readiness: lane 7 of every 8 writes the line's last 8 bytes as (tag, epoch) in the
// same 16-byte store as its payload; a reader re-reads the warp's four lines (one load
// instruction reads a whole line) until all four carry the tag, then (drop) discards them.
__device__ __forceinline__ void put_line(uint4* line, uint4 code, unsigned tag, unsigned epoch, int lane) {
  if ((lane & 7) == 7) code.z = tag, code.w = epoch;
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(line), "r"(code.x), "r"(code.y), "r"(code.z),
               "r"(code.w)
               : "memory");
}
__device__ __forceinline__ uint4 get_line(const uint4* line, unsigned tag, unsigned epoch, int lane, bool drop) {
  uint4 code;
  for (;;) {
    asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(code.x), "=r"(code.y), "=r"(code.z), "=r"(code.w)
                 : "l"(line)
                 : "memory");
    const bool mine = (lane & 7) != 7 || (code.z == tag && code.w == epoch);
    if (__all_sync(0xffffffffu, __shfl_sync(0xffffffffu, mine, lane | 7))) break;
  }
  if (drop && (lane & 7) == 0)
    asm volatile("discard.global.L2 [%0], 128;" ::"l"(__cvta_generic_to_global(line)) : "memory");
  return code;
}

// warps [0, W/2) of a block produce, [W/2, W) consume; ready[s] / freed[s] hold chunk + 1.
__global__ void __launch_bounds__(256) ring_kernel(const uint4* x, uint4* y, unsigned char* ring, unsigned* ready,
                                                   unsigned* freed, size_t chunks, size_t slots) {
  const int lane = threadIdx.x & 31, w = threadIdx.x / 32, half = blockDim.x / 64;
  const bool producer = w < half;
  const size_t pair = static_cast<size_t>(blockIdx.x) * half + (producer ? w : w - half);
  const size_t pairs = static_cast<size_t>(gridDim.x) * half;
  for (size_t c = pair; c < chunks; c += pairs) {
    const size_t s = c % slots;
    unsigned char* slot = ring + s * PACKET;
    if (producer) {
      if (c >= slots && lane == 0)
        while (ld_acquire(freed + s) != c - slots + 1) {
        }
      __syncwarp();
      const uint4 code = encode(x + (c * CHUNK + lane * V) / 8);
      reinterpret_cast<uint4*>(slot)[lane] = code;
      __syncwarp();
      if (lane == 0) st_release(ready + s, static_cast<unsigned>(c + 1));
    } else {
      if (lane == 0)
        while (ld_acquire(ready + s) != c + 1) {
        }
      __syncwarp();
      const uint4 code = __ldcg(reinterpret_cast<const uint4*>(slot) + lane);
      __syncwarp();
      if (lane == 0) st_release(freed + s, static_cast<unsigned>(c + 1));
      decode(code, y + (c * CHUNK + lane * V) / 8);
    }
  }
}

// The same without separate flags (NCCL's LL128 idea): a chunk's packet is one 16-byte store a
// lane, in 128-byte lines whose last 8 bytes carry (epoch, chunk); a consumer re-reads the warp's
// lines until every line's flag is there (one load instruction reads a whole line at once), so no
// fence and no flag word; the ring is never reused (the epoch tells launches apart). `drop`: the
// consumer discards each line once read, so it is never written back.
// `ahead` > 0: a producer runs at most that many chunks ahead of its consumer (a counter in shared
// memory, no fence), which bounds how far behind the consumer reads; 0: unbounded.
__global__ void __launch_bounds__(256) inband_kernel(const uint4* x, uint4* y, uint4* ring, size_t chunks, unsigned epoch,
                                                     bool drop, unsigned ahead) {
  const int lane = threadIdx.x & 31, w = threadIdx.x / 32, half = blockDim.x / 64;
  const bool producer = w < half;
  const int q = producer ? w : w - half;
  const size_t pair = static_cast<size_t>(blockIdx.x) * half + q;
  const size_t pairs = static_cast<size_t>(gridDim.x) * half;
  __shared__ unsigned consumed[16];
  if (threadIdx.x < 16) consumed[threadIdx.x] = 0;
  __syncthreads();
  volatile unsigned* done = consumed;
  unsigned it = 0;
  for (size_t c = pair; c < chunks; c += pairs, ++it) {
    uint4* line = ring + c * 32 + lane;
    const unsigned tag = static_cast<unsigned>(c) ^ (epoch << 24);
    if (producer) {
      if (ahead)
        while (it - done[q] >= ahead) {
        }
      uint4 code = encode(x + (c * CHUNK + lane * V) / 8);
      put_line(line, code, tag, epoch, lane);
    } else {
      const uint4 code = get_line(line, tag, epoch, lane, drop);
      __syncwarp();
      if (lane == 0) done[q] = it + 1;
      decode(code, y + (c * CHUNK + lane * V) / 8);
    }
  }
}

// Every warp both produces and consumes, as a rank's warps do in the all-reduce: at iteration i
// warp w writes the packet of its chunk w + i W and reads the packet its partner warp (W / 2 away,
// the stand-in for a peer) wrote `lag` iterations earlier, then writes that chunk's y; flags in
// the lines as in inband_kernel, the ring never reused, a discard of each line once read.
__global__ void __launch_bounds__(256) exchange_kernel(const uint4* x, uint4* y, uint4* ring, size_t chunks, unsigned epoch,
                                                       unsigned lag, bool drop) {
  const int lane = threadIdx.x & 31;
  const size_t W = static_cast<size_t>(gridDim.x) * (blockDim.x / 32);
  const size_t w = static_cast<size_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  const size_t partner = (w + W / 2) % W;
  const size_t iters = (chunks + W - 1) / W;
  for (size_t i = 0; i < iters + lag; ++i) {
    const size_t c = w + i * W;
    if (i < iters && c < chunks) {
      uint4 code = encode(x + (c * CHUNK + lane * V) / 8);
      put_line(ring + c * 32 + lane, code, static_cast<unsigned>(c) ^ (epoch << 24), epoch, lane);
    }
    const size_t d = partner + (i - lag) * W;
    if (i >= lag && d < chunks) {
      const uint4* line = ring + d * 32 + lane;
      const unsigned tag = static_cast<unsigned>(d) ^ (epoch << 24);
      const uint4 code = get_line(line, tag, epoch, lane, drop);
      decode(code, y + (d * CHUNK + lane * V) / 8);
    }
  }
}

__global__ void fused_kernel(const uint4* x, uint4* y, size_t n16) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n16; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint4 v = x[i];
    v.x &= 0xF000F000u, v.y &= 0xF000F000u, v.z &= 0xF000F000u, v.w &= 0xF000F000u;
    y[i] = v;
  }
}

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 1024;
  const size_t bytes = mib << 20, n = bytes / 2, chunks = n / CHUNK;
  int sms = 0, dev = 0;
  ECHO_PROBE_CHECK(cudaGetDevice(&dev));
  ECHO_PROBE_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop{};
  ECHO_PROBE_CHECK(cudaGetDeviceProperties(&prop, dev));
  uint4 *x, *y;
  unsigned char* ring;
  unsigned *ready, *freed;
  const size_t max_slots = chunks;  // the largest ring: no slot reused
  ECHO_PROBE_CHECK(cudaMalloc(&x, bytes));
  ECHO_PROBE_CHECK(cudaMalloc(&y, bytes));
  ECHO_PROBE_CHECK(cudaMalloc(&ring, max_slots * PACKET));
  ECHO_PROBE_CHECK(cudaMalloc(&ready, max_slots * 4));
  ECHO_PROBE_CHECK(cudaMalloc(&freed, max_slots * 4));
  ECHO_PROBE_CHECK(cudaMemset(x, 0x5a, bytes));
  cudaEvent_t a, b;
  ECHO_PROBE_CHECK(cudaEventCreate(&a));
  ECHO_PROBE_CHECK(cudaEventCreate(&b));
  const char* env = std::getenv("RING_PROBE_REPS");  // 1 under ncu
  const int reps = env ? std::atoi(env) : 7;
  auto time = [&](auto&& launch) {
    launch();
    ECHO_PROBE_CHECK(cudaDeviceSynchronize());
    std::vector<float> t;
    for (int r = 0; r < reps; ++r) {
      ECHO_PROBE_CHECK(cudaEventRecord(a));
      launch();
      ECHO_PROBE_CHECK(cudaEventRecord(b));
      ECHO_PROBE_CHECK(cudaEventSynchronize(b));
      float ms = 0;
      ECHO_PROBE_CHECK(cudaEventElapsedTime(&ms, a, b));
      t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2] * 1e3;
  };
  std::printf("# %s, %d SMs, L2 %d MiB; x = %zu MiB bf16; median of %d after 1 warm-up\n", prop.name, sms,
              prop.l2CacheSize >> 20, mib, reps);
  std::printf("%-34s %10s %12s\n", "pass", "time (us)", "x GB/s");
  const double memcpy_us = time([&] { ECHO_PROBE_CHECK(cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice)); });
  std::printf("%-34s %10.1f %12.1f\n", "cudaMemcpy x -> y", memcpy_us, bytes / memcpy_us / 1e3);
  const double fused_us = time([&] { fused_kernel<<<sms * 8, 256>>>(x, y, bytes / 16); });
  std::printf("%-34s %10.1f %12.1f\n", "fused x -> y (no ring)", fused_us, bytes / fused_us / 1e3);
  const int blocks = sms * 4;  // 4 blocks of 8 warps a SM: all resident (the spin needs it)
  const size_t pairs = static_cast<size_t>(blocks) * 4;
  for (size_t ring_mib : {1, 2, 4, 8, 16, 32, 64, 128, 0}) {
    size_t slots = ring_mib ? std::max<size_t>(1, (ring_mib << 20) / PACKET / pairs) * pairs : max_slots;  // a slot a pair at least
    if (slots > max_slots) slots = max_slots;
    ECHO_PROBE_CHECK(cudaMemset(ready, 0, max_slots * 4));
    ECHO_PROBE_CHECK(cudaMemset(freed, 0, max_slots * 4));
    // the flags hold chunk + 1 of the last use; every timed launch must start from zero
    const double us = time([&] {
      ECHO_PROBE_CHECK(cudaMemsetAsync(ready, 0, slots * 4));
      ECHO_PROBE_CHECK(cudaMemsetAsync(freed, 0, slots * 4));
      ring_kernel<<<blocks, 256>>>(x, y, ring, ready, freed, chunks, slots);
    });
    char name[64];
    std::snprintf(name, sizeof name, "ring %.1f MiB%s", slots * PACKET / 1048576.0, ring_mib ? "" : " (no reuse)");
    std::printf("%-34s %10.1f %12.1f\n", name, us, bytes / us / 1e3);
  }
  // the in-band kernels: every launch a new epoch, so no flag needs resetting
  unsigned epoch = 0;
  auto inband = [&](const char* what, unsigned knob, bool drop, auto&& launch) {
    const double us = time([&] { launch(++epoch & 0xFFu); });
    char name[64];
    std::snprintf(name, sizeof name, "%s %u%s", what, knob, drop ? ", discard" : "");
    std::printf("%-34s %10.1f %12.1f\n", name, us, bytes / us / 1e3);
  };
  uint4* const lines = reinterpret_cast<uint4*>(ring);
  for (unsigned ahead : {0u, 1u, 2u, 4u, 8u})
    for (bool drop : {false, true})
      inband("in-band, ahead", ahead, drop,
             [&](unsigned e) { inband_kernel<<<blocks, 256>>>(x, y, lines, chunks, e, drop, ahead); });
  for (unsigned lag : {1u, 2u, 4u})
    for (bool drop : {false, true})
      inband("exchange, lag", lag, drop,
             [&](unsigned e) { exchange_kernel<<<blocks, 256>>>(x, y, lines, chunks, e, lag, drop); });
  ECHO_PROBE_CHECK(cudaGetLastError());
  return 0;
}
