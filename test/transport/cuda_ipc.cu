// transport::cuda_ipc across processes: one process per GPU, bootstrapped through a user
// all-gather callback and through an NCCL communicator (children run transport/ipc_child.cu).
#include "support/gpu_harness.cuh"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

extern char** environ;

namespace {

/// Start one child per rank and wait (at most 180 s) for all of them; returns their exit codes.
std::vector<int> run_children(const char* mode, int P) {
  char tmpl[] = "/tmp/echo-ipc-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl, seed = std::to_string(echo_test::seed());
  std::vector<pid_t> pids;
  for (int r = 0; r < P; ++r) {
    const std::string rank = std::to_string(r), size = std::to_string(P);
    char* argv[] = {const_cast<char*>(ECHO_IPC_CHILD), const_cast<char*>(rank.c_str()), const_cast<char*>(size.c_str()),
                    const_cast<char*>(dir.c_str()), const_cast<char*>(mode), const_cast<char*>(seed.c_str()), nullptr};
    pid_t pid;
    REQUIRE(posix_spawn(&pid, ECHO_IPC_CHILD, nullptr, nullptr, argv, environ) == 0);
    pids.push_back(pid);
  }
  std::vector<int> codes(static_cast<size_t>(P), -1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(180);
  for (size_t left = pids.size(); left > 0;) {
    for (size_t r = 0; r < pids.size(); ++r) {
      if (codes[r] != -1) continue;
      int st = 0;
      if (waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        codes[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
        --left;
      }
    }
    if (std::chrono::steady_clock::now() > deadline) {
      for (size_t r = 0; r < pids.size(); ++r)
        if (codes[r] == -1) kill(pids[r], SIGKILL), waitpid(pids[r], nullptr, 0), codes[r] = 124;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::system(("rm -rf " + dir).c_str());
  return codes;
}

int gpus() {
  int n = 0;
  cudaGetDeviceCount(&n);
  return std::min(n, echo::communicator::max_ranks);
}

}  // namespace

TEST_CASE("one process per GPU, bootstrapped by a user all-gather callback") {
  for (int code : run_children("callback", gpus())) CHECK(code == 0);
}

TEST_CASE("one process per GPU, bootstrapped by an NCCL communicator") {
  for (int code : run_children("nccl", gpus())) CHECK(code == 0);
}

TEST_CASE("the symmetric buffer maps every peer (single process)") {
  auto& comms = echo_test::local_comms();
  std::vector<std::unique_ptr<echo::transport::cuda_ipc::symmetric_buffer>> bufs(comms.size());
  echo::for_each_rank(comms, [&](const echo::communicator& c) {
    bufs[static_cast<size_t>(c.rank())] = std::make_unique<echo::transport::cuda_ipc::symmetric_buffer>(c, 4096);
  });
  for (auto& b : bufs) CHECK(b->bytes() == 4096);
  // The local view and the peer's view of a buffer are both writable.
  for (size_t r = 0; r < bufs.size(); ++r) CHECK(bufs[r]->peer_data(static_cast<int>(r)) == bufs[r]->data());
}
