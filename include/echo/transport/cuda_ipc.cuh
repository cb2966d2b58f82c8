// transport::cuda_ipc: single-node peer-to-peer over NVLink / PCIe through mapped memory.
#pragma once

#include "../communicator.cuh"
#include "../detail/cuda_check.cuh"

#include <string>
#include <vector>

namespace echo::transport {

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

}  // namespace detail

/// Device code pushes into peers' memory with plain (16-byte) stores and publishes with
/// system-scope release flags. One process may drive all GPUs (peers mapped with
/// cudaDeviceEnablePeerAccess), or one process per GPU (cudaIpc handles exchanged through the
/// communicator's all-gather).
struct cuda_ipc {
  static constexpr const char* name = "cuda_ipc";

  /// A device buffer of the same size on every rank, mapped into every peer. Collective to build.
  /// The first probe_bytes hold the peer probe; usable memory starts at data().
  class symmetric_buffer {
   public:
    static constexpr size_t probe_bytes = 256;

    symmetric_buffer(const communicator& comm, size_t bytes) : rank_(comm.rank()), size_(comm.size()) {
      const char* call = "echo::transport::cuda_ipc::symmetric_buffer";
      bytes_ = bytes + probe_bytes;
      ECHO_CUDA_TRY(cudaSetDevice(comm.device()));
      ECHO_CUDA_TRY(cudaMalloc(&local_, bytes_));
      ECHO_CUDA_TRY(cudaMemset(local_, 0, bytes_));
      ECHO_CUDA_TRY(cudaDeviceSynchronize());
      struct entry {
        int pid;
        int device;
        unsigned long long bytes;
        void* ptr;
        cudaIpcMemHandle_t handle;
      } mine{static_cast<int>(getpid()), comm.device(), bytes_, local_, {}};
      const bool solo = comm.size() == 1;
      if (!solo) ECHO_CUDA_TRY(cudaIpcGetMemHandle(&mine.handle, local_));
      const std::vector<entry> all = comm.all_gather(mine);
      peers_.assign(static_cast<size_t>(size_), nullptr);
      opened_.assign(static_cast<size_t>(size_), false);
      for (int r = 0; r < size_; ++r) {
        const entry& e = all[static_cast<size_t>(r)];
        ECHO_REQUIRE(e.bytes == bytes_, call, "ranks asked for different workspace sizes");
        if (r == rank_) {
          peers_[static_cast<size_t>(r)] = local_;
        } else if (e.pid == mine.pid) {  // same process: direct peer access
          int can = 0;
          ECHO_CUDA_TRY(cudaDeviceCanAccessPeer(&can, comm.device(), e.device));
          ECHO_REQUIRE(can || e.device == comm.device(), call,
                       "no peer access from device " + std::to_string(comm.device()) + " to device " + std::to_string(e.device));
          if (e.device != comm.device()) {
            const cudaError_t st = cudaDeviceEnablePeerAccess(e.device, 0);
            if (st == cudaErrorPeerAccessAlreadyEnabled) (void)cudaGetLastError();
            else ECHO_CUDA_TRY(st);
          }
          peers_[static_cast<size_t>(r)] = static_cast<unsigned char*>(e.ptr);
        } else {
          void* p = nullptr;
          ECHO_CUDA_TRY(cudaIpcOpenMemHandle(&p, e.handle, cudaIpcMemLazyEnablePeerAccess));
          peers_[static_cast<size_t>(r)] = static_cast<unsigned char*>(p);
          opened_[static_cast<size_t>(r)] = true;
        }
      }
      probe(comm);
    }

    symmetric_buffer(const symmetric_buffer&) = delete;
    symmetric_buffer& operator=(const symmetric_buffer&) = delete;

    ~symmetric_buffer() {
      for (size_t r = 0; r < peers_.size(); ++r)
        if (opened_[r]) (void)cudaIpcCloseMemHandle(peers_[r]);
      if (local_) (void)cudaFree(local_);
      (void)cudaGetLastError();
    }

    unsigned char* data() const { return local_ + probe_bytes; }
    /// Rank r's buffer (past the probe), as this rank's device addresses it.
    unsigned char* peer_data(int r) const { return peers_[static_cast<size_t>(r)] + probe_bytes; }
    size_t bytes() const { return bytes_ - probe_bytes; }

   private:
    // Write through every mapping and read it back, on the device: trust no driver's word.
    void probe(const communicator& comm) {
      const char* call = "echo::transport::cuda_ipc::symmetric_buffer (peer probe)";
      unsigned char** d_peers = nullptr;
      uint32_t* d_ok = nullptr;
      ECHO_CUDA_TRY(cudaMalloc(&d_peers, sizeof(void*) * peers_.size()));
      ECHO_CUDA_TRY(cudaMalloc(&d_ok, sizeof(uint32_t)));
      ECHO_CUDA_TRY(cudaMemcpy(d_peers, peers_.data(), sizeof(void*) * peers_.size(), cudaMemcpyHostToDevice));
      detail::probe_peers<><<<1, 1>>>(d_peers, rank_, size_, d_ok);
      ECHO_CUDA_TRY(cudaGetLastError());
      ECHO_CUDA_TRY(cudaDeviceSynchronize());
      uint32_t ok = 0;
      ECHO_CUDA_TRY(cudaMemcpy(&ok, d_ok, sizeof ok, cudaMemcpyDeviceToHost));
      (void)cudaFree(d_peers);
      (void)cudaFree(d_ok);
      comm.barrier();  // every peer has written into our probe slots
      std::vector<uint32_t> slots(static_cast<size_t>(size_));
      ECHO_CUDA_TRY(cudaMemcpy(slots.data(), local_, sizeof(uint32_t) * slots.size(), cudaMemcpyDeviceToHost));
      for (int r = 0; r < size_; ++r)
        ok &= slots[static_cast<size_t>(r)] ==
              (0xEC000000u | (static_cast<uint32_t>(r) << 8) | static_cast<uint32_t>(rank_));
      const std::vector<uint32_t> all = comm.all_gather(ok);
      for (int r = 0; r < size_; ++r)
        ECHO_REQUIRE(all[static_cast<size_t>(r)] == 1u, call,
                     "rank " + std::to_string(r) + " could not write to and read back from its peers' memory");
    }

    int rank_, size_;
    size_t bytes_ = 0;
    unsigned char* local_ = nullptr;
    std::vector<unsigned char*> peers_;
    std::vector<bool> opened_;
  };
};

}  // namespace echo::transport
