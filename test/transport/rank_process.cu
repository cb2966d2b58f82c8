// One rank of the one-process-per-GPU tests (started by transport/cuda_ipc.cu and
// transport/nccl.cu). It bootstraps a communicator through a file-based all-gather callback or
// an NCCL communicator, runs calls of several policies, chains, in place, a captured CUDA graph
// and bad arguments, and compares its output with echo::reference computed for all ranks from
// the shared seed.
//   rank_process <rank> <size> <dir> <callback|nccl> <cuda_ipc|nccl> <seed>
#define DOCTEST_CONFIG_DISABLE  // support/random.hpp speaks doctest; this program is no test runner
#include <echo/echo.cuh>

#include "support/random.hpp"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

/// all-gather over files in a directory shared by the ranks (a stand-in for a user's
/// torch.distributed / MPI all-gather).
struct file_all_gather {
  std::string dir;
  int rank, size;
  int round = 0;
  void operator()(const void* send, void* recv, size_t bytes) {
    const std::string base = dir + "/" + std::to_string(round++) + ".";
    {
      std::ofstream f(base + std::to_string(rank) + ".tmp", std::ios::binary);
      f.write(static_cast<const char*>(send), static_cast<std::streamsize>(bytes));
    }
    std::rename((base + std::to_string(rank) + ".tmp").c_str(), (base + std::to_string(rank)).c_str());
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    for (int r = 0; r < size; ++r) {
      for (;;) {
        std::ifstream f(base + std::to_string(r), std::ios::binary);
        if (f && f.read(static_cast<char*>(recv) + static_cast<size_t>(r) * bytes, static_cast<std::streamsize>(bytes)))
          break;
        if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("file_all_gather: peer missing");
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
  }
};

int failures = 0;
#define EXPECT(cond)                                                                   \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      std::fprintf(stderr, "rank %d: %s:%d: EXPECT(%s) failed\n", g_rank, __FILE__, __LINE__, #cond); \
      ++failures;                                                                      \
    }                                                                                  \
  } while (0)
int g_rank = 0;

/// Runs `sizes` calls of all_reduce<Q, Transport, C> on T and checks each against the reference.
template <class Transport, class Q, class C, class T>
void scenario(const echo::communicator& comm, uint64_t seed, std::vector<size_t> sizes, bool in_place = false,
              int graph_replays = 0) {
  const int P = comm.size(), rank = comm.rank();
  size_t max_n = 1;
  for (size_t n : sizes) max_n = std::max(max_n, n);
  echo::all_reduce_options opt;
  opt.workspace_bytes = size_t(1) << 20;  // large calls wrap around the workspace
  opt.spin_limit_seconds = 60;            // ranks sharing a GPU across processes are time-sliced
  opt.unquantized_below_bytes = 0;        // check Q itself at every size, not the size dispatch
  using AR = echo::all_reduce<Q, Transport, C>;
  AR ar(comm, max_n, opt);
  std::unique_ptr<typename AR::chain_type> ch;
  if constexpr (C::keeps_state) ch = std::make_unique<typename AR::chain_type>(max_n);
  echo::reference::all_reduce<Q, C> ref(P);
  echo::reference::chain_state<C> ref_chain(P, max_n);
  echo_test::rng rng(seed);  // the same stream in every rank
  T *in = nullptr, *out = nullptr;
  ECHO_CUDA_TRY(cudaMalloc(&in, max_n * sizeof(T)));
  ECHO_CUDA_TRY(cudaMalloc(&out, max_n * sizeof(T)));
  cudaStream_t stream;
  ECHO_CUDA_TRY(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraphExec_t exec = nullptr;
  auto check = [&](size_t n, const std::vector<std::vector<T>>& x) {
    std::vector<std::vector<T>> want(static_cast<size_t>(P), std::vector<T>(n));
    std::vector<const T*> ri;
    std::vector<T*> ro;
    for (int r = 0; r < P; ++r) ri.push_back(x[r].data()), ro.push_back(want[r].data());
    ref(ri, ro, n, &ref_chain);
    std::vector<T> got(n);
    ECHO_CUDA_TRY(cudaMemcpy(got.data(), in_place ? in : out, n * sizeof(T), cudaMemcpyDeviceToHost));
    const bool same = std::memcmp(got.data(), want[rank].data(), n * sizeof(T)) == 0;
    if (!same) std::fprintf(stderr, "rank %d: %s %s %s n=%zu: mismatch\n", rank, Transport::name, Q::name, C::name, n);
    EXPECT(same);
  };
  const size_t calls = sizes.size() + static_cast<size_t>(graph_replays);
  for (size_t k = 0; k < calls; ++k) {
    const size_t n = k < sizes.size() ? sizes[k] : sizes.back();
    std::vector<std::vector<T>> x(static_cast<size_t>(P));
    for (auto& v : x) v = echo_test::random_elements<T>(rng, n);
    // on the call's stream: a plain cudaMemcpy from pageable memory may return before its DMA
    // lands, and the call's stream is non-blocking
    ECHO_CUDA_TRY(cudaMemcpyAsync(in, x[rank].data(), n * sizeof(T), cudaMemcpyHostToDevice, stream));
    if (k < sizes.size()) {
      EXPECT(ar(in, in_place ? in : out, n, stream, ch.get()) == echo::status::success);
    } else {
      if (!exec) {  // capture once, after the chain's shape is set by an eager call
        cudaGraph_t g;
        ECHO_CUDA_TRY(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        const echo::status s = ar(in, in_place ? in : out, n, stream, ch.get());
        ECHO_CUDA_TRY(cudaStreamEndCapture(stream, &g));
        EXPECT(s == echo::status::success);
        ECHO_CUDA_TRY(cudaGraphInstantiate(&exec, g, 0));
        ECHO_CUDA_TRY(cudaGraphDestroy(g));
      }
      ECHO_CUDA_TRY(cudaGraphLaunch(exec, stream));
    }
    ECHO_CUDA_TRY(cudaStreamSynchronize(stream));
    EXPECT(ar.check() == echo::status::success);
    check(n, x);
  }
  // Bad arguments: rejected, no launch, the object still usable by the next scenario's peers.
  EXPECT(ar(static_cast<const T*>(nullptr), out, 10, stream, ch.get()) == echo::status::invalid_argument);
  EXPECT(ar(in, out, max_n + 1, stream, ch.get()) == echo::status::invalid_argument);
  if (exec) cudaGraphExecDestroy(exec);
  cudaStreamDestroy(stream);
  cudaFree(in);
  cudaFree(out);
  comm.barrier();  // nobody unmaps or frees while a peer may still write
}

template <class Transport>
void run_all(const echo::communicator& comm, uint64_t seed) {
  using bf16 = echo::bfloat16_t;
  using za4 = echo::quant::zero_aware<4, 128>;
  using ef16 = echo::comp::error_feedback<bf16>;
  scenario<Transport, za4, ef16, bf16>(comm, seed, {1000003, 1000003, 1000003, 4097, 4097, 1, 127});
  scenario<Transport, za4, ef16, bf16>(comm, seed + 1, {262147, 262147}, /*in_place=*/true);
  scenario<Transport, echo::quant::symmetric<8, 32>, echo::comp::none, float>(comm, seed + 2, {127, 4097, 300007});
  scenario<Transport, echo::quant::naive_zero_point<4, 256>, echo::comp::error_feedback<float>, echo::half_t>(
      comm, seed + 3, {100003, 100003});
  scenario<Transport, echo::quant::none, echo::comp::none, bf16>(comm, seed + 4, {65537});
  scenario<Transport, za4, ef16, bf16>(comm, seed + 5, {65537}, false, /*graph_replays=*/5);
}

int run(int rank, int size, const std::string& dir, const std::string& boot, const std::string& transport,
        uint64_t seed) {
  g_rank = rank;
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess || gpus == 0) return 3;
  const int device = rank % gpus;  // several processes a GPU when size > gpus
  if (cudaSetDevice(device) != cudaSuccess) return 3;
  file_all_gather ag{dir, rank, size};
  ncclComm_t nccl = nullptr;
  std::unique_ptr<echo::communicator> comm;
  if (boot == "nccl") {
    ncclUniqueId id{};
    if (rank == 0) ECHO_NCCL_TRY(ncclGetUniqueId(&id));
    std::vector<ncclUniqueId> ids(static_cast<size_t>(size));
    ag(&id, ids.data(), sizeof id);
    ECHO_NCCL_TRY(ncclCommInitRank(&nccl, size, ids[0], rank));
    comm = std::make_unique<echo::communicator>(echo::communicator::from_nccl(nccl));
  } else {
    comm = std::make_unique<echo::communicator>(rank, size, device, ag);
  }
  if (transport == "nccl") run_all<echo::transport::nccl::tag>(*comm, seed);
  else run_all<echo::transport::cuda_ipc::tag>(*comm, seed);
  comm.reset();
  if (nccl) ncclCommDestroy(nccl);
  std::printf("rank %d (%s bootstrap, %s transport): %s\n", rank, boot.c_str(), transport.c_str(),
              failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: %s <rank> <size> <dir> <callback|nccl> <cuda_ipc|nccl> <seed>\n", argv[0]);
    return 2;
  }
  try {
    return run(std::atoi(argv[1]), std::atoi(argv[2]), argv[3], argv[4], argv[5], std::strtoull(argv[6], nullptr, 10));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %s: %s\n", argv[1], e.what());
    return 1;
  }
}
