// Which stream each rank of a cuda_ipc object group that shares this process and a GPU used for its
// recent calls. Two such ranks' kernels of one call queued on one stream deadlock: the second waits
// behind the first, which spins until the second's flags arrive. The second call is refused before
// it launches (the engine then makes every rank's call give up at once, rather than at the spin
// limit).
#pragma once

#include "../../config.cuh"

#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

namespace echo::transport::cuda_ipc {

class colocated_streams {
 public:
  /// The calls of one rank: how many it made, and the stream of each of the last `depth`.
  struct log {
    static constexpr size_t depth = 16;
    uint64_t calls = 0;
    cudaStream_t streams[depth] = {};
  };

  /// Rank `rank` of the group `group` (a value every rank of one object group agrees on) keeps its
  /// calls in `l` until leave().
  static void join(uint64_t group, int rank, int ranks, log* l) {
    std::lock_guard<std::mutex> lk(mutex());
    auto& g = groups()[group];
    g.resize(static_cast<size_t>(ranks), nullptr);
    g[static_cast<size_t>(rank)] = l;
  }
  static void leave(uint64_t group, int rank) {
    std::lock_guard<std::mutex> lk(mutex());
    auto it = groups().find(group);
    if (it == groups().end()) return;
    it->second[static_cast<size_t>(rank)] = nullptr;
    for (const log* l : it->second)
      if (l) return;
    groups().erase(it);
  }

  /// Record rank `rank`'s next call on `stream`; false (and nothing recorded) when another rank
  /// of the group in this process already made that same call on that stream.
  static bool claim(uint64_t group, int rank, cudaStream_t stream) {
    std::lock_guard<std::mutex> lk(mutex());
    auto& g = groups()[group];
    log* mine = g[static_cast<size_t>(rank)];
    const uint64_t k = mine->calls;
    for (size_t q = 0; q < g.size(); ++q) {
      const log* other = g[q];
      if (q == static_cast<size_t>(rank) || !other || other->calls <= k || other->calls - k > log::depth) continue;
      if (other->streams[k % log::depth] == stream) return false;
    }
    mine->streams[k % log::depth] = stream;
    ++mine->calls;
    return true;
  }

 private:
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::map<uint64_t, std::vector<log*>>& groups() {
    static std::map<uint64_t, std::vector<log*>> g;
    return g;
  }
};

}  // namespace echo::transport::cuda_ipc
