// echo-codec-profile: the per-value cost of Echo's codec, on one GPU, in a form ncu can replay.
//
// transport::nccl's three staged kernels (push: quantize a peer's segment; reduce: decode P - 1
// packets, sum, quantize the sum; gather: decode an owner's packet) do the same per-tile
// arithmetic as transport::cuda_ipc's fused kernel (collective/tile_stages.cuh), but they never
// wait on a peer: NCCL moves their packets. Here the "peer" is this rank itself (P = 2, rank 0):
// the push's packets for rank 1 are copied into the receive slot and the reduced packet into the
// gather slot, so the kernels read valid packets and headers. The values are meaningless as an
// all-reduce; what counts is what every kernel executes for n / 2 values. Under ncu:
//
//   ncu --clock-control none --kernel-name regex:'push_kernel|reduce_kernel|gather_kernel'
//       --metrics smsp__thread_inst_executed.sum,launch__registers_per_thread,... echo-codec-profile
//
// prints per kernel and configuration instructions, registers and bytes; tools/codec_profile.py
// turns ncu's CSV into thread instructions a value. Without ncu it prints each kernel's time (CUDA
// events, median of 20): a cross-check, not a benchmark; `echo-codec-profile N REPS policies` adds
// the kernels under other pipeline policies (occupancy: threads x blocks a SM).
#include <echo/echo.cuh>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

#define ECHO_PROFILE_CHECK(x)                                                                  \
  do {                                                                                         \
    const cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "echo-codec-profile: %s: %s\n", #x, cudaGetErrorString(e_));        \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

using bf16 = echo::bfloat16_t;
using default_policy = echo::tuning::default_policy;

__global__ void fill(bf16* x, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
    const float u = static_cast<float>(h >> 8) * (1.0f / 16777216.0f) - 0.5f;  // [-0.5, 0.5)
    x[i] = echo::element_traits<bf16>::from_float(u * 4.0f);
  }
}

template <class Q, class Comp, class policy = default_policy>
void profile(const char* label, size_t n, int reps) {
  using Cfg = echo::collective::tile_config<Q, bf16, Comp, policy>;
  namespace staged = echo::transport::nccl;
  const int P = 2;
  const size_t granule = echo::detail::granule_of<Q>();
  const echo::detail::partition part{n, granule, P};
  const size_t subs = echo::detail::ceil_div(part.size(0), Cfg::sub_elems);
  const size_t slot = staged::slot_header::bytes + subs * Cfg::sub_bytes;
  const size_t slot_bytes = (slot + 255) & ~size_t(255);
  bf16 *in = nullptr, *out = nullptr;
  unsigned char *ws = nullptr, *state = nullptr;
  int* status = nullptr;
  ECHO_PROFILE_CHECK(cudaMalloc(&in, n * sizeof(bf16)));
  ECHO_PROFILE_CHECK(cudaMalloc(&out, n * sizeof(bf16)));
  ECHO_PROFILE_CHECK(cudaMalloc(&ws, (3 * P + 1) * slot_bytes));
  ECHO_PROFILE_CHECK(cudaMalloc(&status, sizeof(int)));
  ECHO_PROFILE_CHECK(cudaMemset(ws, 0, (3 * P + 1) * slot_bytes));
  ECHO_PROFILE_CHECK(cudaMemset(status, 0, sizeof(int)));
  size_t state_bytes = 0;
  if constexpr (Comp::keeps_state) {
    state_bytes = Comp::state_bytes(n);
    ECHO_PROFILE_CHECK(cudaMalloc(&state, state_bytes));
    ECHO_PROFILE_CHECK(cudaMemset(state, 0, state_bytes));
    const uint64_t tag = echo::comp::state_header::key(n, Cfg::domain);  // a continued chain: the kernels read and write the stored errors
    ECHO_PROFILE_CHECK(cudaMemcpy(state, &tag, sizeof(tag), cudaMemcpyHostToDevice));
  }
  fill<<<1024, 256>>>(in, n, 12345u);
  ECHO_PROFILE_CHECK(cudaGetLastError());

  staged::chunk_params c{};
  c.n = n;
  c.chain_key = echo::comp::state_header::key(n, Cfg::domain);
  c.element_type = static_cast<unsigned>(echo::element_traits<typename Cfg::element>::tag);
  c.granule = granule;
  c.rank = 0;
  c.ranks = P;
  c.sig = 0x5eed;
  c.chunk = 0;
  c.chunk_offset = 0;
  c.chunk_len = subs * Cfg::sub_elems;
  c.slot_bytes = slot_bytes;
  c.send = ws;
  c.recv = ws + P * slot_bytes;
  c.reduced = ws + 2 * P * slot_bytes;
  c.gathered = ws + (2 * P + 1) * slot_bytes;
  c.state = state;
  c.end_chain = staged::chain_end::none;  // the tag stays: every repetition continues the chain
  c.status = status;

  int sms = 0;
  ECHO_PROFILE_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int grid = sms * policy::blocks_per_sm;
  cudaEvent_t a, b;
  ECHO_PROFILE_CHECK(cudaEventCreate(&a));
  ECHO_PROFILE_CHECK(cudaEventCreate(&b));
  const char* names[3] = {"push", "reduce", "gather"};
  std::vector<float> ms[3];
  for (int r = 0; r < reps; ++r) {
    for (int k = 0; k < 3; ++k) {
      ECHO_PROFILE_CHECK(cudaEventRecord(a));
      if (k == 0) staged::push_kernel<Cfg><<<grid, Cfg::threads>>>(c, in, true);
      if (k == 1) staged::reduce_kernel<Cfg><<<grid, Cfg::threads>>>(c, in, out);
      if (k == 2) staged::gather_kernel<Cfg><<<grid, Cfg::threads>>>(c, out);
      ECHO_PROFILE_CHECK(cudaEventRecord(b));
      ECHO_PROFILE_CHECK(cudaEventSynchronize(b));
      float t = 0;
      ECHO_PROFILE_CHECK(cudaEventElapsedTime(&t, a, b));
      ms[k].push_back(t);
      // stand in for NCCL: the push's packets for rank 1 arrive as rank 1's; the reduced packet
      // as owner 1's (its header names the same signature and chunk)
      if (k == 0) ECHO_PROFILE_CHECK(cudaMemcpy(c.recv + 1 * slot_bytes, c.send + 1 * slot_bytes, slot_bytes, cudaMemcpyDeviceToDevice));
      if (k == 1) ECHO_PROFILE_CHECK(cudaMemcpy(c.gathered + 1 * slot_bytes, c.reduced, slot_bytes, cudaMemcpyDeviceToDevice));
    }
  }
  int st = 0;
  ECHO_PROFILE_CHECK(cudaMemcpy(&st, status, sizeof(int), cudaMemcpyDeviceToHost));
  const double values = static_cast<double>(part.size(0));
  for (int k = 0; k < 3; ++k) {
    std::sort(ms[k].begin(), ms[k].end());
    const double t = ms[k][ms[k].size() / 2];
    std::printf("%-18s %-7s n=%zu values=%.0f packet_bytes=%zu time_us=%.1f ns_per_kvalue=%.3f%s\n", label, names[k], n,
                values, slot, t * 1e3, t * 1e6 / values * 1e3, st ? "  STATUS!=0" : "");
  }
  cudaFree(in), cudaFree(out), cudaFree(ws), cudaFree(status);
  if (state) cudaFree(state);
  cudaEventDestroy(a), cudaEventDestroy(b);
}

}  // namespace

int main(int argc, char** argv) {
  // Default: 64 Mi values (128 MiB bf16), 32 Mi per kernel: large enough to fill the GPU.
  const size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 0) : size_t(64) << 20;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 20;
  const bool policies = argc > 3 && std::string(argv[3]) == "policies";
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) {
    std::printf("echo-codec-profile: no GPU, skipped\n");
    return 77;
  }
  using namespace echo;
  profile<quant::zero_aware<4, 128>, comp::none>("int4", n, reps);
  profile<quant::zero_aware<4, 128>, comp::error_feedback<>>("int4_ef", n, reps);
  profile<quant::zero_aware<4, 128>, comp::error_feedback<comp::int8_state>>("int4_ef8", n, reps);
  profile<quant::zero_aware<4, 128>, comp::error_feedback<bfloat16_t>>("int4_ef16", n, reps);
  // the outlier path: the Hadamard transform, then the clip too (the default quantizer)
  profile<quant::rotated<quant::zero_aware<4, 128>>, comp::none>("int4_rot", n, reps);
  profile<quant::rotated<quant::zero_aware<4, 128>>, comp::error_feedback<>>("int4_rot_ef", n, reps);
  profile<default_quantizer, comp::none>("int4_rot_clip", n, reps);
  profile<default_quantizer, default_compensator>("int4_rot_clip_ef8", n, reps);
  profile<quant::zero_aware<8, 128>, comp::none>("int8", n, reps);
  profile<quant::zero_aware<8, 128>, comp::error_feedback<>>("int8_ef", n, reps);
  profile<quant::none, comp::none>("none16", n, reps);
  if (policies) {  // the staged kernels at other occupancies (they never spin, so any grid is safe)
    using tuning::pipeline_policy;
    using ef = comp::error_feedback<>;
    profile<quant::zero_aware<4, 128>, comp::none, pipeline_policy<256, 3>>("int4 t256x3", n, reps);
    profile<quant::zero_aware<4, 128>, comp::none, pipeline_policy<256, 4>>("int4 t256x4", n, reps);
    profile<quant::zero_aware<4, 128>, comp::none, pipeline_policy<512, 2>>("int4 t512x2", n, reps);
    profile<quant::zero_aware<4, 128>, ef, pipeline_policy<256, 3>>("int4_ef t256x3", n, reps);
    profile<quant::zero_aware<4, 128>, ef, pipeline_policy<256, 4>>("int4_ef t256x4", n, reps);
    profile<quant::zero_aware<4, 128>, ef, pipeline_policy<512, 2>>("int4_ef t512x2", n, reps);
    profile<quant::zero_aware<8, 128>, comp::none, pipeline_policy<256, 4>>("int8 t256x4", n, reps);
    profile<quant::none, comp::none, pipeline_policy<256, 4>>("none16 t256x4", n, reps);
  }
  return 0;
}
