"""Time of one all-reduce through torch: NCCL (torch.distributed.all_reduce) against Echo's op,
called eagerly and replayed from a CUDA graph, bf16, on 2 GPUs. The small sizes show the op's
per-call overhead (docs/python.md).

    torchrun --nproc_per_node 2 examples/python/bench_op.py [--sizes 64K,1M,16M,256M] [--iters 200]
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist

from echo_allreduce import EchoAllReduce


def parse_size(s: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * units[s[-1]] if s[-1] in units else int(s)


def timed(fn, iters: int) -> float:
    """Mean microseconds per call of fn over iters calls (CUDA events), after a warm-up."""
    for _ in range(5):
        fn()
    dist.barrier()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000 / iters


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="64K,256K,1M,4M,16M,64M,256M")
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--comp", default="none", choices=["none", "error_feedback"])
    args = p.parse_args()
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    n_max = max(sizes) // 2
    comm = EchoAllReduce(None, n_max, comp=args.comp)
    chain = comm.new_chain()
    if rank == 0:
        print(f"{comm}; bf16; microseconds per call (CUDA events, {args.iters} calls)")
        print(f"{'bytes':>10} {'NCCL':>10} {'Echo':>10} {'Echo graph':>11} {'NCCL/Echo':>10}")
    for size in sizes:
        x = torch.randn(size // 2, device="cuda").to(torch.bfloat16)
        out = torch.empty_like(x)
        nccl = timed(lambda: dist.all_reduce(x), args.iters)
        echo = timed(lambda: comm.all_reduce(x, out=out, chain=chain), args.iters)
        graph = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            comm.all_reduce(x, out=out, chain=chain)
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(graph):
            for _ in range(10):
                comm.all_reduce(x, out=out, chain=chain)
        graphed = timed(graph.replay, max(1, args.iters // 10)) / 10
        if rank == 0:
            print(f"{size:>10} {nccl:>10.1f} {echo:>10.1f} {graphed:>11.1f} {nccl / echo:>9.2f}x")
    comm.check()
    comm.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
