#!/usr/bin/env python3
"""How many HBM bytes a second does one GPU sustain for traffic shaped like Echo's?

Echo's pipeline kernels at 1 GiB read and write about as many bytes as each other (ncu:
4-bit 2.54 / 2.52 B a value, 4-bit + EF 3.60 / 3.57, 8-bit 3.05 / 3.06; docs/benchmarks.md), so a
plain copy is the closest standard workload. This times, on GPU 0, torch's copy_ of a bf16 tensor
(as many bytes read as written), a read-only pass (sum of int64 words) and a write-only pass
(fill_), alone and as two copies on two streams at once (two ranks sharing a GPU), and prints the
HBM bytes a second (read + write) of each: the ceiling the all-reduce's local traffic has on this
GPU. Median of 20 timed runs after 3 warm-up runs, CUDA events. Needs torch and one GPU; seconds.

    python3 scripts/dram-rate-probe.py [--mib 1024]
"""
import argparse
import json
import statistics

import torch


def timed(fn, reps=20, warm=3):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e-3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mib", type=int, default=1024, help="size of each source tensor in MiB (default 1024)")
    ap.add_argument("--json", help="also write the results to this file")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("dram-rate-probe: skipped, no GPU")
        return
    dev = torch.device("cuda", 0)
    nbytes = args.mib << 20
    n = nbytes // 2
    src = [torch.randn(n, device=dev, dtype=torch.bfloat16) for _ in range(2)]
    dst = [torch.empty_like(s) for s in src]
    words = src[0].view(torch.int64)
    streams = [torch.cuda.Stream(dev) for _ in range(2)]

    def two_copies():
        cur = torch.cuda.current_stream(dev)
        for s, d, x in zip(streams, dst, src):
            s.wait_stream(cur)
            with torch.cuda.stream(s):
                d.copy_(x)
        for s in streams:
            cur.wait_stream(s)

    rows = [
        ("copy_ (read = write)", lambda: dst[0].copy_(src[0]), 2 * nbytes),
        ("two copies on two streams", two_copies, 4 * nbytes),
        ("read only (sum of int64)", lambda: words.sum(), nbytes),
        ("write only (fill_)", lambda: dst[0].fill_(1.0), nbytes),
    ]
    out = {"gpu": torch.cuda.get_device_name(dev), "mib": args.mib, "rows": []}
    print(f"# {out['gpu']}, {args.mib} MiB a source tensor; HBM bytes read + written a second")
    for name, fn, moved in rows:
        t = timed(fn)
        out["rows"].append({"what": name, "seconds": t, "bytes": moved, "tb_per_s": moved / t / 1e12})
        print(f"{name:28s} {t * 1e6:9.1f} us  {moved / t / 1e12:5.2f} TB/s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
