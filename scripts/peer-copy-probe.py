#!/usr/bin/env python3
"""How fast do copy engines move data between GPU 0 and GPU 1, and through which call?

The end-to-end background generator's torch copies ran at 14 GB/s a direction on 2 x H200 with
peer access on (docs/end-to-end.md). This times the same 32 MiB copies three ways, each direction
alone and both at once: torch's `copy_`, and cudaMemcpyPeerAsync / cudaMemcpyAsync called through
ctypes on the same tensors' pointers and streams. Prints GB/s per direction and the allocator
settings that could explain a slow path. Needs torch and two GPUs; runs in seconds.
"""
import ctypes
import os
import time

import torch


def main():
    if torch.cuda.device_count() < 2:
        print("peer-copy-probe: skipped, fewer than 2 GPUs")
        return
    cudart = ctypes.CDLL("libcudart.so." + torch.version.cuda.split(".")[0])
    print("PYTORCH_CUDA_ALLOC_CONF =", os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "(unset)"))
    print("torch.cuda.can_device_access_peer(0, 1) =", torch.cuda.can_device_access_peer(0, 1))
    for d in (0, 1):
        torch.cuda.set_device(d)
        rc = cudart.cudaDeviceEnablePeerAccess(1 - d, 0)
        cudart.cudaGetLastError()
        print(f"cudaDeviceEnablePeerAccess({d} -> {1 - d}) = {rc} (0 ok, 704 already enabled)")
    n = 32 << 20
    d0, d1 = torch.device("cuda", 0), torch.device("cuda", 1)
    a0, b0 = torch.empty(n, dtype=torch.uint8, device=d0), torch.empty(n, dtype=torch.uint8, device=d0)
    a1, b1 = torch.empty(n, dtype=torch.uint8, device=d1), torch.empty(n, dtype=torch.uint8, device=d1)
    s0, s1 = torch.cuda.Stream(d0), torch.cuda.Stream(d1)
    cudart.cudaMemcpyPeerAsync.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_int,
                                           ctypes.c_size_t, ctypes.c_void_p]
    cudart.cudaMemcpyAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                       ctypes.c_void_p]

    def torch_copy(fwd, bwd):
        if fwd:
            with torch.cuda.stream(s0):
                b1.copy_(a0, non_blocking=True)
        if bwd:
            with torch.cuda.stream(s1):
                b0.copy_(a1, non_blocking=True)

    def peer_copy(fwd, bwd):
        if fwd:
            assert cudart.cudaMemcpyPeerAsync(b1.data_ptr(), 1, a0.data_ptr(), 0, n, s0.cuda_stream) == 0
        if bwd:
            assert cudart.cudaMemcpyPeerAsync(b0.data_ptr(), 0, a1.data_ptr(), 1, n, s1.cuda_stream) == 0

    def default_copy(fwd, bwd):  # cudaMemcpyDefault (4): unified addressing picks the devices
        if fwd:
            assert cudart.cudaMemcpyAsync(b1.data_ptr(), a0.data_ptr(), n, 4, s0.cuda_stream) == 0
        if bwd:
            assert cudart.cudaMemcpyAsync(b0.data_ptr(), a1.data_ptr(), n, 4, s1.cuda_stream) == 0

    def sync():
        for d in (0, 1):
            torch.cuda.synchronize(d)

    for name, fn in (("torch copy_", torch_copy), ("cudaMemcpyPeerAsync", peer_copy), ("cudaMemcpyAsync default", default_copy)):
        for label, fwd, bwd in (("0->1", True, False), ("1->0", False, True), ("both", True, True)):
            for _ in range(3):
                fn(fwd, bwd)
            sync()
            reps = 20
            t = time.perf_counter()
            for _ in range(reps):
                fn(fwd, bwd)
            sync()
            dt = (time.perf_counter() - t) / reps
            print(f"{name:24s} {label:5s} {n / dt / 1e9:7.1f} GB/s a direction ({1e6 * dt:.0f} us per 32 MiB)")


if __name__ == "__main__":
    main()
