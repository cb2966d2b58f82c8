"""Helpers of the multi-rank tests. run_ranks runs a test body on P ranks, one process each
(torch.multiprocessing, spawn), in a fresh torch.distributed group: gloo on CPU, NCCL with rank r
on cuda:r. A failing rank's traceback fails the test; a hang fails it after `timeout` seconds
instead of blocking the suite. The rest compare torch tensors with echo_allreduce.reference."""

from __future__ import annotations

import os
import sys
import tempfile
import time


def _entry(rank, world, backend, init_file, fn, args, env):
    os.environ.update(env)
    import torch
    import torch.distributed as dist

    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        fn(rank, world, *args)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    # The verdict is in: leave without the interpreter's teardown, where gloo's worker threads
    # intermittently abort the process ("terminate called without an active exception") after a
    # test that passed. A failing body raised above and still reports its traceback.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run_ranks(fn, world: int = 2, backend: str = "gloo", args=(), env=None, timeout: float = 300.0):
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as d:
        ctx = mp.start_processes(_entry, args=(world, backend, os.path.join(d, "init"), fn, tuple(args), dict(env or {})),
                                 nprocs=world, join=False, start_method="spawn")
        deadline = time.monotonic() + timeout
        while not ctx.join(timeout=1):
            if time.monotonic() > deadline:
                for p in ctx.processes:
                    if p.is_alive():
                        p.kill()
                raise TimeoutError(f"{fn.__name__} did not finish on {world} ranks within {timeout} s")


# ---- tensors vs the reference (torch is imported by the callers) --------------------------------
def to_numpy(t):
    """The tensor's values as the reference takes them (bf16 as uint16 bits), on the host."""
    import numpy as np
    import torch

    np_type = {torch.float32: np.float32, torch.float16: np.float16, torch.bfloat16: np.uint16}[t.dtype]
    return t.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().view(np_type)


def dtype_name(dtype):
    import torch

    return {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}[dtype]


def same_bits(a, b):
    import torch

    return a.numel() == b.numel() and torch.equal(a.detach().cpu().contiguous().view(-1).view(torch.uint8),
                                                  b.detach().cpu().contiguous().view(-1).view(torch.uint8))


def from_numpy(a, dtype, like):
    import torch

    return torch.from_numpy(a.view("uint8")).view(dtype).view(like.shape)


def rank_inputs(call, n, dtype, world):
    """Every rank's input of a call, the same on every process (seeded by call and rank), on CPU:
    normal values of a different scale per rank."""
    import torch

    out = []
    for r in range(world):
        g = torch.Generator().manual_seed(1000 * call + r)
        out.append((torch.randn(n, generator=g) * (0.01 + r)).to(dtype))
    return out
