#!/usr/bin/env python3
"""The all-reduce beside work: a bf16 GEMM (cuBLAS through torch) on one stream
of each GPU while an all-reduce runs on another, for NCCL and for Echo, each from the same run.

    python3 examples/python/beside_gemm.py --out beside-gemm.json           # spawns 2 ranks
    python3 examples/python/beside_gemm.py --cpu --size-mib 1 --gemm 256    # a CPU check of the code

Per backend it times, with CUDA events, the median of --reps rounds of:
  alone      the GEMM by itself; the all-reduce by itself
  together   both issued at once on their own streams: the GEMM's time, the all-reduce's time,
             and the round's wall time (from the first issue to the last completion)
and reports the GEMM's slowdown beside the all-reduce (what a persistent, spinning all-reduce
kernel costs the GEMM: Echo's grid takes SM slots NCCL's few channels do not) and the
all-reduce's slowdown beside the GEMM. The GEMM's size (--gemm, M = N = K) should make it last
about as long as the all-reduce alone: the script prints both so the choice can be checked.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from allreduce_backends import AllReduce  # noqa: E402
from tp_layers import launch  # noqa: E402


def main_rank(args, dev):
    rank, cuda = dist.get_rank(), dev.type == "cuda"
    n = (args.size_mib << 20) // 2  # bf16 values
    x = torch.randn(n, device=dev).to(torch.bfloat16)
    a = torch.randn(args.gemm, args.gemm, device=dev).to(torch.bfloat16)
    b = torch.randn(args.gemm, args.gemm, device=dev).to(torch.bfloat16)
    s_ar = torch.cuda.Stream(dev) if cuda else None
    s_mm = torch.cuda.Stream(dev) if cuda else None
    out = {"config": vars(args), "device": torch.cuda.get_device_name(dev) if cuda else "cpu",
           "date": time.strftime("%Y-%m-%d %H:%M"), "backends": {}}

    def log(msg):
        if rank == 0:
            print(msg, flush=True)

    def timed(stream, fn):
        """fn on stream; (start, end) events, or wall-clock stand-ins on the CPU."""
        if not cuda:
            t = time.perf_counter()
            fn()
            return t, time.perf_counter()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        with torch.cuda.stream(stream):
            e0.record()
            fn()
            e1.record()
        return e0, e1

    def ms(pair):
        return (pair[1] - pair[0]) * 1e3 if not cuda else pair[0].elapsed_time(pair[1])

    def sync():
        if cuda:
            torch.cuda.synchronize(dev)
        dist.barrier()

    for spec in args.backends.split(","):
        ar = AllReduce(spec, max_elements=n)
        chain = ar.new_chain()
        y = x.clone()

        def reduce():
            ar(y, chain)

        def fresh():  # the same input and a fresh chain every round, outside the timed regions
            y.copy_(x)
            ar.reset(chain)

        def gemm():
            torch.mm(a, b)

        rounds = {"gemm_alone": [], "ar_alone": [], "gemm_together": [], "ar_together": [], "wall_together": []}
        for r in range(args.warmup + args.reps):
            sync()
            g = timed(s_mm, gemm)
            fresh()
            sync()
            c = timed(s_ar, reduce)
            fresh()
            sync()
            # together: both streams start after one event, so neither waits for the other's issue
            if cuda:
                start = torch.cuda.Event(enable_timing=True)
                start.record()
                s_ar.wait_event(start)
                s_mm.wait_event(start)
            else:
                start = time.perf_counter()
            c2 = timed(s_ar, reduce)
            g2 = timed(s_mm, gemm)
            sync()
            if r < args.warmup:
                continue
            rounds["gemm_alone"].append(ms(g))
            rounds["ar_alone"].append(ms(c))
            rounds["gemm_together"].append(ms(g2))
            rounds["ar_together"].append(ms(c2))
            last = max(c2[1], g2[1], key=lambda e: ms((start, e))) if cuda else max(c2[1], g2[1])
            rounds["wall_together"].append(ms((start, last)))
        med = {k: statistics.median(v) for k, v in rounds.items()}
        med["gemm_slowdown"] = med["gemm_together"] / med["gemm_alone"]
        med["ar_slowdown"] = med["ar_together"] / med["ar_alone"]
        med["fallbacks_to_nccl"] = ar.fallbacks
        out["backends"][spec] = med
        log(f"{spec:18s} alone: GEMM {med['gemm_alone']:.3f} ms, all-reduce {med['ar_alone']:.3f} ms; together: "
            f"GEMM {med['gemm_together']:.3f} ms ({med['gemm_slowdown']:.2f}x), all-reduce "
            f"{med['ar_together']:.3f} ms ({med['ar_slowdown']:.2f}x), both done after {med['wall_together']:.3f} ms")
    if rank == 0 and args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        json.dump(out, open(args.out, "w"), indent=1)
        log(f"wrote {args.out}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", default="nccl,echo:za4g128+ef,echo:za4g128")
    ap.add_argument("--size-mib", type=int, default=64, help="all-reduce message, bf16")
    ap.add_argument("--gemm", type=int, default=6144, help="M = N = K of the bf16 GEMM")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", default=None)
    ap.add_argument("--cpu", action="store_true")
    ap.add_argument("--nproc", type=int, default=2)
    args = ap.parse_args()
    launch(main_rank, args, args.nproc)


if __name__ == "__main__":
    main()
