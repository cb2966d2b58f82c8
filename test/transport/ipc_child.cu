// One rank of the one-process-per-GPU test (started by transport/cuda_ipc.cu): bootstraps a
// communicator through a file-based all-gather callback or through NCCL, runs a chain of calls
// and compares its output with echo::reference computed for all ranks from the shared seed.
//   ipc_child <rank> <size> <dir> <callback|nccl> <seed>
#include <echo/echo.cuh>

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

using bf16 = echo::bfloat16_t;
using Q = echo::quant::zero_aware<4, 128>;
using C = echo::comp::error_feedback<bf16>;

std::vector<bf16> random_input(std::mt19937_64& rng, size_t n) {
  std::normal_distribution<float> nd;
  std::vector<bf16> v(n);
  for (auto& x : v) x = echo::element_traits<bf16>::from_float(nd(rng));
  return v;
}

int run(int rank, int size, const std::string& dir, const std::string& mode, uint64_t seed) {
  if (cudaSetDevice(rank) != cudaSuccess) return 3;
  file_all_gather ag{dir, rank, size};
  ncclComm_t nccl = nullptr;
  std::unique_ptr<echo::communicator> comm;
  if (mode == "nccl") {
    ncclUniqueId id{};
    if (rank == 0) ECHO_NCCL_TRY(ncclGetUniqueId(&id));
    std::vector<ncclUniqueId> ids(static_cast<size_t>(size));
    ag(&id, ids.data(), sizeof id);
    ECHO_NCCL_TRY(ncclCommInitRank(&nccl, size, ids[0], rank));
    comm = std::make_unique<echo::communicator>(echo::communicator::from_nccl(nccl));
  } else {
    comm = std::make_unique<echo::communicator>(rank, size, rank, ag);
  }
  const size_t max_n = 1000003;
  echo::all_reduce_options opt;
  opt.workspace_bytes = size_t(1) << 20;
  opt.spin_limit_seconds = 20;
  int failures = 0;
  {
    echo::all_reduce<Q, echo::transport::cuda_ipc, C> ar(*comm, max_n, opt);
    echo::chain<C> ch(max_n);
    echo::reference::all_reduce<Q, C> ref(size);
    echo::reference::chain_state<C> ref_chain(size, max_n);
    std::mt19937_64 rng(seed);  // the same stream in every rank
    bf16 *in = nullptr, *out = nullptr;
    ECHO_CUDA_TRY(cudaMalloc(&in, max_n * sizeof(bf16)));
    ECHO_CUDA_TRY(cudaMalloc(&out, max_n * sizeof(bf16)));
    const size_t sizes[] = {1000003, 1000003, 1000003, 4097, 4097};
    for (size_t n : sizes) {
      std::vector<std::vector<bf16>> x(static_cast<size_t>(size)), want(static_cast<size_t>(size), std::vector<bf16>(n));
      for (auto& v : x) v = random_input(rng, n);
      ECHO_CUDA_TRY(cudaMemcpy(in, x[rank].data(), n * sizeof(bf16), cudaMemcpyHostToDevice));
      const echo::status s = ar(in, out, n, nullptr, &ch);
      ECHO_CUDA_TRY(cudaDeviceSynchronize());
      if (s != echo::status::success || ar.check() != echo::status::success) {
        std::fprintf(stderr, "rank %d: call failed: %s / %s\n", rank, echo::to_string(s), echo::to_string(ar.check()));
        return 1;
      }
      std::vector<bf16> got(n);
      ECHO_CUDA_TRY(cudaMemcpy(got.data(), out, n * sizeof(bf16), cudaMemcpyDeviceToHost));
      std::vector<const bf16*> ri;
      std::vector<bf16*> ro;
      for (int r = 0; r < size; ++r) ri.push_back(x[r].data()), ro.push_back(want[r].data());
      ref(ri, ro, n, &ref_chain);
      for (size_t i = 0; i < n; ++i)
        if (got[i].bits != want[rank][i].bits) {
          std::fprintf(stderr, "rank %d (%s): n %zu mismatch at %zu\n", rank, mode.c_str(), n, i);
          ++failures;
          break;
        }
    }
    cudaFree(in);
    cudaFree(out);
    comm->barrier();  // nobody unmaps while a peer may still write
  }
  if (nccl) ncclCommDestroy(nccl);
  std::printf("rank %d (%s): %s\n", rank, mode.c_str(), failures ? "MISMATCH" : "ok");
  return failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s <rank> <size> <dir> <callback|nccl> <seed>\n", argv[0]);
    return 2;
  }
  try {
    return run(std::atoi(argv[1]), std::atoi(argv[2]), argv[3], argv[4], std::strtoull(argv[5], nullptr, 10));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %s: %s\n", argv[1], e.what());
    return 1;
  }
}
