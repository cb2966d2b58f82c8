// Start one rank_process per GPU (one process per GPU, as PyTorch / vLLM run) and wait for them.
#pragma once

#include <doctest/doctest.h>

#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace echo_test {

/// Runs ECHO_RANK_PROCESS for ranks 0..P-1 with the given bootstrap and transport, extra
/// environment entries added; waits at most `limit_s` seconds; returns the exit codes (124: killed).
inline std::vector<int> spawn_ranks(int P, const char* boot, const char* transport, unsigned long long seed,
                                    const std::vector<std::string>& extra_env = {}, int limit_s = 300) {
  char tmpl[] = "/tmp/echo-ranks-XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl, seed_s = std::to_string(seed), size = std::to_string(P);
  std::vector<std::string> env_store(extra_env);
  for (char** e = environ; *e; ++e) env_store.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<pid_t> pids;
  for (int r = 0; r < P; ++r) {
    const std::string rank = std::to_string(r);
    const char* argv[] = {ECHO_RANK_PROCESS, rank.c_str(), size.c_str(), dir.c_str(), boot, transport, seed_s.c_str(), nullptr};
    pid_t pid;
    REQUIRE(posix_spawn(&pid, ECHO_RANK_PROCESS, nullptr, nullptr, const_cast<char* const*>(argv), envp.data()) == 0);
    pids.push_back(pid);
  }
  std::vector<int> codes(static_cast<size_t>(P), -1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(limit_s);
  for (size_t left = pids.size(); left > 0;) {
    for (size_t r = 0; r < pids.size(); ++r) {
      int st = 0;
      if (codes[r] == -1 && waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        codes[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
        --left;
      }
    }
    if (left && std::chrono::steady_clock::now() > deadline) {
      for (size_t r = 0; r < pids.size(); ++r)
        if (codes[r] == -1) kill(pids[r], SIGKILL), waitpid(pids[r], nullptr, 0), codes[r] = 124;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const std::string rm = "rm -rf " + dir;
  CHECK(std::system(rm.c_str()) == 0);
  return codes;
}

}  // namespace echo_test
