"""Run a test body on P ranks, one process each (torch.multiprocessing, spawn), in a fresh
torch.distributed group: gloo on CPU, NCCL with rank r on cuda:r. A failing rank's traceback
fails the test; a hang fails it after `timeout` seconds instead of blocking the suite."""

from __future__ import annotations

import os
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
