// cuda_ipc's symmetric buffer: a device buffer of the same size on every rank, mapped into every
// peer (cudaDeviceEnablePeerAccess within a process, cudaIpc handles across processes, exchanged
// through the communicator's all-gather), and probed on the device before it is trusted.
#pragma once

#include "../../communicator.cuh"
#include "../../detail/collective_setup.cuh"
#include "../../detail/cuda_check.cuh"
#include "../../detail/device_guard.cuh"
#include "../../detail/signature.cuh"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace echo::transport::cuda_ipc {

namespace detail {

template <int = 0>
__global__ void probe_peers(unsigned char* const* peers, int rank, int size, uint32_t* ok) {
  // Write a rank-specific word into each peer's probe slot through the mapping, read it back.
  uint32_t good = 1;
  for (int r = 0; r < size; ++r) {
    volatile uint32_t* slot = reinterpret_cast<volatile uint32_t*>(peers[r]) + rank;
    const uint32_t v = 0xEC000000u | (static_cast<uint32_t>(rank) << 8) | static_cast<uint32_t>(r);
    *slot = v;
    __threadfence_system();
    good &= (*slot == v) ? 1u : 0u;
  }
  *ok = good;
}

/// Peer access this process enabled, so that a second object does not ask again (the driver
/// answers cudaErrorPeerAccessAlreadyEnabled, which compute-sanitizer lists as an API error).
inline void enable_peer_access(int device, int peer) {
  static std::mutex m;
  static std::set<std::pair<int, int>> enabled;
  std::lock_guard<std::mutex> lk(m);
  if (!enabled.insert({device, peer}).second) return;
  const cudaError_t st = cudaDeviceEnablePeerAccess(peer, 0);
  if (st == cudaErrorPeerAccessAlreadyEnabled) (void)cudaGetLastError();  // enabled by someone else
  else ECHO_CUDA_TRY(st);
}

}  // namespace detail

/// Collective to build.
/// The first probe_bytes hold the peer probe; usable memory starts at data().
class symmetric_buffer {
 public:
  static constexpr size_t probe_bytes = 256;

  symmetric_buffer(const communicator& comm, size_t bytes)
      : rank_(comm.rank()), size_(comm.size()), device_(comm.device()) {
    try {
      build(comm, bytes);
    } catch (...) {
      release();  // the destructor does not run for a constructor that throws
      throw;
    }
  }

  symmetric_buffer(const symmetric_buffer&) = delete;
  symmetric_buffer& operator=(const symmetric_buffer&) = delete;

  ~symmetric_buffer() { release(); }

  unsigned char* data() const { return local_ + probe_bytes; }
  /// Rank r's buffer (past the probe), as this rank's device addresses it.
  unsigned char* peer_data(int r) const { return peers_[static_cast<size_t>(r)] + probe_bytes; }
  size_t bytes() const { return bytes_ - probe_bytes; }
  /// The most ranks of the communicator on one GPU (the same value on every rank).
  int ranks_per_device() const { return ranks_per_device_; }

 private:
  // Collective: throws on every rank or on none (detail/collective_setup.cuh).
  void build(const communicator& comm, size_t bytes) {
    const char* call = "echo::transport::cuda_ipc::symmetric_buffer";
    echo::detail::device_guard guard(comm.device());
    echo::detail::collective_setup setup(comm, call);
    bytes_ = bytes + probe_bytes;
    struct entry {
      int pid;
      int device;
      unsigned long long bytes;
      void* ptr;
      cudaIpcMemHandle_t handle;
      uint64_t host;     // which machine (hash of the host name)
      char bus_id[32];   // which GPU of it (PCI bus id)
    } mine{static_cast<int>(getpid()), comm.device(), bytes_, nullptr, {}, echo::detail::host_fingerprint(), {}};
    const bool solo = comm.size() == 1;
    setup.local([&] {
      ECHO_CUDA_TRY(cudaMalloc(&local_, bytes_));
      ECHO_CUDA_TRY(cudaMemset(local_, 0, bytes_));
      ECHO_CUDA_TRY(cudaDeviceSynchronize());
      ECHO_CUDA_TRY(cudaDeviceGetPCIBusId(mine.bus_id, sizeof mine.bus_id, comm.device()));
      if (!solo) ECHO_CUDA_TRY(cudaIpcGetMemHandle(&mine.handle, local_));
      mine.ptr = local_;
    });
    const std::vector<entry> all = setup.all_gather(mine);
    peers_.assign(static_cast<size_t>(size_), nullptr);
    opened_.assign(static_cast<size_t>(size_), false);
    setup.local([&] {
      for (int r = 0; r < size_; ++r) {
        const entry& e = all[static_cast<size_t>(r)];
        ECHO_REQUIRE(e.bytes == bytes_, call, "ranks asked for different workspace sizes (rank " + std::to_string(r) + ")");
        ECHO_REQUIRE(e.host == mine.host, call, "rank " + std::to_string(r) + " is on another machine: cuda_ipc is single-node (use transport::nccl)");
        int sharing = 0;  // ranks on rank r's GPU
        for (const entry& o : all) sharing += std::strncmp(o.bus_id, e.bus_id, sizeof e.bus_id) == 0;
        ranks_per_device_ = std::max(ranks_per_device_, sharing);
        if (r == rank_) {
          peers_[static_cast<size_t>(r)] = local_;
        } else if (e.pid == mine.pid) {  // same process: direct peer access
          if (e.device != comm.device()) {
            int can = 0;
            ECHO_CUDA_TRY(cudaDeviceCanAccessPeer(&can, comm.device(), e.device));
            ECHO_REQUIRE(can, call, "no peer access from device " + std::to_string(comm.device()) + " to device " + std::to_string(e.device));
            detail::enable_peer_access(comm.device(), e.device);
          }
          peers_[static_cast<size_t>(r)] = static_cast<unsigned char*>(e.ptr);
        } else {
          void* p = nullptr;
          ECHO_CUDA_TRY(cudaIpcOpenMemHandle(&p, e.handle, cudaIpcMemLazyEnablePeerAccess));
          peers_[static_cast<size_t>(r)] = static_cast<unsigned char*>(p);
          opened_[static_cast<size_t>(r)] = true;
        }
      }
    });
    probe(setup);
  }

  void release() {
    echo::detail::device_guard guard(device_);  // the caller may be on another device
    for (size_t r = 0; r < peers_.size(); ++r)
      if (opened_[r]) (void)cudaIpcCloseMemHandle(peers_[r]);
    peers_.clear();
    opened_.clear();
    if (local_) (void)cudaFree(local_);
    local_ = nullptr;
    (void)cudaGetLastError();
  }

  // Write through every mapping and read it back, on the device: trust no driver's word.
  void probe(echo::detail::collective_setup& setup) {
    const char* call = "echo::transport::cuda_ipc::symmetric_buffer (peer probe)";
    uint32_t ok = 0;
    setup.local([&] {
      unsigned char** d_peers = nullptr;
      uint32_t* d_ok = nullptr;
      const auto free_both = [&] {
        if (d_peers) (void)cudaFree(d_peers);
        if (d_ok) (void)cudaFree(d_ok);
      };
      try {
        ECHO_CUDA_TRY(cudaMalloc(&d_peers, sizeof(void*) * peers_.size()));
        ECHO_CUDA_TRY(cudaMalloc(&d_ok, sizeof(uint32_t)));
        ECHO_CUDA_TRY(cudaMemcpy(d_peers, peers_.data(), sizeof(void*) * peers_.size(), cudaMemcpyHostToDevice));
        int rank = rank_, size = size_;
        void* args[] = {&d_peers, &rank, &size, &d_ok};
        // The launch's own status (an error the caller left behind must not fail the probe).
        ECHO_CUDA_TRY(cudaLaunchKernel(reinterpret_cast<const void*>(&detail::probe_peers<>), dim3(1), dim3(1), args, 0, nullptr));
        ECHO_CUDA_TRY(cudaDeviceSynchronize());
        ECHO_CUDA_TRY(cudaMemcpy(&ok, d_ok, sizeof ok, cudaMemcpyDeviceToHost));
      } catch (...) {
        free_both();
        throw;
      }
      free_both();
    });
    setup.agree();  // every peer has written into our probe slots
    setup.local([&] {
      std::vector<uint32_t> slots(static_cast<size_t>(size_));
      ECHO_CUDA_TRY(cudaMemcpy(slots.data(), local_, sizeof(uint32_t) * slots.size(), cudaMemcpyDeviceToHost));
      for (int r = 0; r < size_; ++r)
        ok &= slots[static_cast<size_t>(r)] ==
              (0xEC000000u | (static_cast<uint32_t>(r) << 8) | static_cast<uint32_t>(rank_));
    });
    const std::vector<uint32_t> all = setup.all_gather(ok);
    for (int r = 0; r < size_; ++r)
      ECHO_REQUIRE(all[static_cast<size_t>(r)] == 1u, call,
                   "rank " + std::to_string(r) + " could not write to and read back from its peers' memory");
  }

  int rank_, size_, device_;
  int ranks_per_device_ = 0;
  size_t bytes_ = 0;
  unsigned char* local_ = nullptr;
  std::vector<unsigned char*> peers_;
  std::vector<bool> opened_;
};

}  // namespace echo::transport::cuda_ipc
