// transport::nccl: the same pipeline over ncclSend / ncclRecv, one process per GPU, on NVLink and
// with NCCL forced onto its socket transport over loopback (the stand-in for a link between
// nodes). Each rank runs transport/rank_process.cu, which checks every call against
// echo::reference (so also against the cuda_ipc transport, which matches it bit for bit). Built
// with GPU_PER_RANK: NCCL refuses two ranks on one GPU, so with ECHO_TEST_RANKS above the GPUs
// there are, the whole test reports itself skipped (test/gpu_main.cu).
#include "support/gpu_harness.cuh"
#include "support/spawn_ranks.hpp"

#include <string>
#include <vector>

TEST_CASE("nccl transport, NCCL on its default (NVLink / P2P) path") {
  for (int code : echo_test::spawn_ranks(echo_test::test_ranks(), "nccl", "nccl", echo_test::seed()))
    CHECK(code == 0);
}

TEST_CASE("nccl transport, NCCL forced onto sockets over loopback") {
  const std::vector<std::string> env = {"NCCL_P2P_DISABLE=1", "NCCL_SHM_DISABLE=1", "NCCL_SOCKET_IFNAME=lo"};
  for (int code : echo_test::spawn_ranks(echo_test::test_ranks(), "nccl", "nccl", echo_test::seed(), env))
    CHECK(code == 0);
}

TEST_CASE("a communicator without an ncclComm_t cannot build the nccl transport") {
  // Every rank constructs, as the constructor is collective: one rank alone would wait 120 s in
  // the configuration check's all-gather and throw for that reason instead (as this case
  // once did, passing after 120 s for the wrong reason).
  auto& comms = echo_test::local_comms();  // made without NCCL
  std::vector<std::string> why(comms.size());
  echo::for_each_rank(comms, [&](const echo::communicator& c) {
    try {
      echo::all_reduce<echo::quant::zero_aware<4, 128>, echo::transport::nccl::tag> ar(c, 1000);
    } catch (const echo::error& e) {
      why[static_cast<size_t>(c.rank())] = e.what();
    }
  });
  for (const std::string& w : why)
    CHECK_MESSAGE(w.find("holds no ncclComm_t") != std::string::npos, (w.empty() ? std::string("the constructor did not throw") : w));
}

TEST_CASE("nccl transport: ranks whose buffers are refused: every rank throws, none waits in NCCL, nothing leaks") {
  // The engine's allocation comes after its exchanges; before (2026-12-01) a refused rank threw
  // alone and its peers, built, would have waited in NCCL on their first call, forever.
  if (!echo_test::runnable<echo::transport::nccl::tag>()) return;
  auto& comms = *echo_test::nccl_comms();
  echo::all_reduce_options opt;
  opt.workspace_bytes = size_t(4) << 30;
  echo_test::check_some_ranks_refused<echo::all_reduce<echo::quant::zero_aware<4, 128>, echo::transport::nccl::tag>>(
      comms, size_t(1) << 30, opt);
}
