// transport::cuda_ipc across processes: one process per GPU, bootstrapped through a user
// all-gather callback and through an NCCL communicator (each rank runs transport/rank_process.cu,
// which checks every call against echo::reference). ECHO_TEST_RANKS=P starts P processes over the
// GPUs there are (several a GPU where fewer; NCCL's bootstrap then reports itself skipped).
#include "support/gpu_harness.cuh"
#include "support/spawn_ranks.hpp"


TEST_CASE("one process per GPU, bootstrapped by a user all-gather callback") {
  for (int code : echo_test::spawn_ranks(echo_test::test_ranks(), "callback", "cuda_ipc", echo_test::seed()))
    CHECK(code == 0);
}

TEST_CASE("one process per GPU, bootstrapped by an NCCL communicator") {
  if (echo_test::test_ranks() > echo_test::gpu_count()) {
    MESSAGE("SKIPPED here: NCCL's bootstrap needs a GPU a rank (NCCL refuses two ranks on one GPU)");
    return;
  }
  for (int code : echo_test::spawn_ranks(echo_test::test_ranks(), "nccl", "cuda_ipc", echo_test::seed()))
    CHECK(code == 0);
}

TEST_CASE("four processes on two GPUs (two ranks a GPU, for correctness)") {
  if (echo_test::gpu_count() < 2) return;
  for (int code : echo_test::spawn_ranks(4, "callback", "cuda_ipc", echo_test::seed())) CHECK(code == 0);
}

TEST_CASE("the symmetric buffer maps every peer (single process)") {
  auto& comms = echo_test::local_comms();
  std::vector<std::unique_ptr<echo::transport::cuda_ipc::symmetric_buffer>> bufs(comms.size());
  echo::for_each_rank(comms, [&](const echo::communicator& c) {
    bufs[static_cast<size_t>(c.rank())] = std::make_unique<echo::transport::cuda_ipc::symmetric_buffer>(c, 4096);
  });
  for (size_t r = 0; r < bufs.size(); ++r) {
    CHECK(bufs[r]->bytes() == 4096);
    CHECK(bufs[r]->peer_data(static_cast<int>(r)) == bufs[r]->data());
  }
}
