// transport::nccl: the Echo pipeline over ncclSend / ncclRecv, for any P and any number of nodes.
#pragma once

#include "../collective/staged_kernels.cuh"
#include "../communicator.cuh"
#include "../detail/cuda_check.cuh"
#include "../detail/partition.cuh"

#include <algorithm>

namespace echo::transport {

/// Packets move as ncclSend / ncclRecv of whole chunks inside group calls, on a side stream of
/// the object's own; the quantize / reduce / dequantize kernels run on the caller's stream. Two
/// buffer sets let chunk c+1 be quantized while chunk c is on the wire:
///   caller stream: push(0) push(1) reduce(0) push(2) reduce(1) gather(0) push(3) ...
///   side stream:   exchange(0) exchange(1) all-gather(0) exchange(2) all-gather(1) ...
/// every arrow between them an event. The side stream forks from the caller's stream at the
/// start of a call and joins it at the end, so a call is stream-ordered and CUDA-graph
/// capturable wherever NCCL's own operations are (NCCL >= 2.9 supports capture of
/// send/recv). Each rank must be driven by its own thread or process: NCCL needs group calls
/// across ranks when one thread drives several GPUs, which would reorder our kernels.
struct nccl {
  static constexpr const char* name = "nccl";

  class channel {
   public:
    static constexpr int sets = 2;

    /// Local (not symmetric) buffers: per set P send, P recv, 1 reduced, P gathered slots.
    channel(const communicator& comm, size_t bytes) : comm_(comm) {
      const char* call = "echo::transport::nccl::channel";
      ECHO_REQUIRE(comm.nccl() != nullptr, call, "the communicator holds no ncclComm_t (use communicator::from_nccl)");
      ECHO_CUDA_TRY(cudaSetDevice(comm.device()));
      bytes_ = bytes;
      ECHO_CUDA_TRY(cudaMalloc(&base_, bytes_));
      ECHO_CUDA_TRY(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
      for (auto& e : events_) ECHO_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    }
    channel(const channel&) = delete;
    channel& operator=(const channel&) = delete;
    ~channel() {
      int prev = -1;
      if (cudaGetDevice(&prev) == cudaSuccess) (void)cudaSetDevice(comm_.device());
      for (auto& e : events_)
        if (e) (void)cudaEventDestroy(e);
      if (side_) (void)cudaStreamDestroy(side_);
      if (base_) (void)cudaFree(base_);
      if (prev >= 0) (void)cudaSetDevice(prev);
      (void)cudaGetLastError();
    }

    size_t bytes() const { return bytes_; }

    /// One call: n elements through chunks of whole tiles. Returns status::cuda_error or
    /// status::nccl_error on a failed launch.
    template <class Q, class T, class S, bool Comp, int Threads, int MinBlocks>
    status run(const T* in, T* out, S* state, bool store_send_error, size_t n, cudaStream_t stream, int grid) {
      using stages = collective::tile_stages<Q, T, S, Comp, collective::tile_threads>;
      const int P = comm_.size(), me = comm_.rank();
      const size_t tile_bytes = stages::codec::tile_bytes(collective::tile_threads);
      const size_t slots = 3 * static_cast<size_t>(P) + 1;
      const size_t tiles = bytes_ / (sets * slots * tile_bytes);
      if (tiles == 0) return status::invalid_argument;
      collective::chunk_params c{};
      c.n = n;
      c.granule = echo::detail::granule_of<Q>();
      c.rank = me;
      c.ranks = P;
      c.chunk_len = tiles * stages::tile_elems;
      c.slot_bytes = tiles * tile_bytes;
      c.tile_bytes = tile_bytes;
      const echo::detail::partition part{n, c.granule, P};
      const size_t chunks = (part.size(0) + c.chunk_len - 1) / c.chunk_len;
      auto set = [&](size_t k) {
        collective::chunk_params s = c;
        unsigned char* b = base_ + (k % sets) * slots * c.slot_bytes;
        s.chunk_offset = k * c.chunk_len;
        s.send = b;
        s.recv = b + P * c.slot_bytes;
        s.reduced = b + 2 * P * c.slot_bytes;
        s.gathered = b + (2 * P + 1) * c.slot_bytes;
        return s;
      };
      // bytes of segment j's share of chunk k: whole tiles
      auto chunk_bytes = [&](size_t k, int j) {
        const size_t len = part.size(j), off = k * c.chunk_len;
        const size_t l = off < len ? std::min(len - off, c.chunk_len) : 0;
        return (l + stages::tile_elems - 1) / stages::tile_elems * tile_bytes;
      };
      cudaEvent_t* ev = events_;  // [0] fork, [1..2] pushed, [3..4] exchanged, [5..6] reduced, [7..8] gathered, [9] join
      auto ok = [](cudaError_t e) { return e == cudaSuccess; };
      auto nok = [](ncclResult_t r) { return r == ncclSuccess; };
      ncclComm_t nc = comm_.nccl();
      bool good = ok(cudaEventRecord(ev[0], stream)) && ok(cudaStreamWaitEvent(side_, ev[0], 0));
      auto push = [&](size_t k) {
        const auto s = set(k);
        collective::push_kernel<Q, T, S, Comp, Threads, MinBlocks><<<grid, Threads, 0, stream>>>(s, in, state, store_send_error);
        good = good && ok(cudaGetLastError()) && ok(cudaEventRecord(ev[1 + k % 2], stream)) &&
               ok(cudaStreamWaitEvent(side_, ev[1 + k % 2], 0));
        if (!good) return;
        const auto x = set(k);
        good = nok(ncclGroupStart());
        for (int d = 1; d < P && good; ++d) {
          const int to = (me + d) % P, from = (me - d + P) % P;
          if (const size_t b = chunk_bytes(k, to)) good = nok(ncclSend(x.send + to * c.slot_bytes, b, ncclUint8, to, nc, side_));
          if (const size_t b = chunk_bytes(k, me); good && b)
            good = nok(ncclRecv(x.recv + from * c.slot_bytes, b, ncclUint8, from, nc, side_));
        }
        good = nok(ncclGroupEnd()) && good;
        good = good && ok(cudaEventRecord(ev[3 + k % 2], side_));
      };
      auto reduce = [&](size_t k) {
        const auto s = set(k);
        good = good && ok(cudaStreamWaitEvent(stream, ev[3 + k % 2], 0));
        if (!good) return;
        collective::reduce_kernel<Q, T, S, Comp, Threads, MinBlocks><<<grid, Threads, 0, stream>>>(s, in, out, state);
        good = ok(cudaGetLastError()) && ok(cudaEventRecord(ev[5 + k % 2], stream)) &&
               ok(cudaStreamWaitEvent(side_, ev[5 + k % 2], 0));
        if (!good) return;
        good = nok(ncclGroupStart());
        for (int d = 1; d < P && good; ++d) {
          const int to = (me + d) % P, from = (me - d + P) % P;
          if (const size_t b = chunk_bytes(k, me)) good = nok(ncclSend(s.reduced, b, ncclUint8, to, nc, side_));
          if (const size_t b = chunk_bytes(k, from); good && b)
            good = nok(ncclRecv(s.gathered + from * c.slot_bytes, b, ncclUint8, from, nc, side_));
        }
        good = nok(ncclGroupEnd()) && good;
        good = good && ok(cudaEventRecord(ev[7 + k % 2], side_));
      };
      auto gather = [&](size_t k) {
        good = good && ok(cudaStreamWaitEvent(stream, ev[7 + k % 2], 0));
        if (!good) return;
        collective::gather_kernel<Q, T, S, Comp, Threads, MinBlocks><<<grid, Threads, 0, stream>>>(set(k), out);
        good = ok(cudaGetLastError());
      };
      // Software pipeline over chunks (see the class comment for the order and why two sets do).
      for (size_t k = 0; k < chunks + 2 && good; ++k) {
        if (k < chunks) push(k);
        if (k >= 1 && k - 1 < chunks) reduce(k - 1);
        if (k >= 2) gather(k - 2);
      }
      good = good && ok(cudaEventRecord(ev[9], side_)) && ok(cudaStreamWaitEvent(stream, ev[9], 0));
      if (good) return status::success;
      return cudaGetLastError() != cudaSuccess ? status::cuda_error : status::nccl_error;
    }

   private:
    communicator comm_;
    size_t bytes_ = 0;
    unsigned char* base_ = nullptr;
    cudaStream_t side_ = nullptr;
    cudaEvent_t events_[10] = {};
  };
};

}  // namespace echo::transport
