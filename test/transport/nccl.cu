// transport::nccl: the same pipeline over ncclSend / ncclRecv, one process per GPU, on NVLink and
// with NCCL forced onto its socket transport over loopback (the stand-in for a link between
// nodes). Each rank runs transport/rank_process.cu, which checks every call against
// echo::reference (so also against the cuda_ipc transport, which matches it bit for bit).
#include "support/gpu_harness.cuh"
#include "support/spawn_ranks.hpp"

#include <algorithm>

TEST_CASE("nccl transport, NCCL on its default (NVLink / P2P) path") {
  for (int code : echo_test::spawn_ranks(std::min(echo_test::gpu_count(), 8), "nccl", "nccl", echo_test::seed()))
    CHECK(code == 0);
}

TEST_CASE("nccl transport, NCCL forced onto sockets over loopback") {
  const std::vector<std::string> env = {"NCCL_P2P_DISABLE=1", "NCCL_SHM_DISABLE=1", "NCCL_SOCKET_IFNAME=lo"};
  for (int code : echo_test::spawn_ranks(std::min(echo_test::gpu_count(), 8), "nccl", "nccl", echo_test::seed(), env))
    CHECK(code == 0);
}

TEST_CASE("a communicator without an ncclComm_t cannot build the nccl transport") {
  auto& comms = echo_test::local_comms();  // made without NCCL
  CHECK_THROWS_AS((echo::all_reduce<echo::quant::zero_aware<4, 128>, echo::transport::nccl>(comms[0], 1000)), echo::error);
}
