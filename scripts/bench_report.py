#!/usr/bin/env python3
"""Turn echo_bench JSON output into the markdown tables (and optionally a plot) in docs/.

usage: scripts/bench_report.py BENCH.json [BENCH.json ...] [--plot OUT.png] [--variants a,b,c] [--targets]

Several files (passes of one binary): each cell is the mean over the passes, and the speedup's
pass-to-pass spread (half the range) is printed beside it. --targets also prints the speed
targets (P = 2, bf16, against NCCL in the same run) with the mean and the worst pass of
each, and whether the mean meets it: a table to read, not a verdict on one run's noise.
"""
import argparse
import json
import re
from collections import defaultdict


def human(n):
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


def load(path):
    data = json.load(open(path))
    rows = defaultdict(dict)  # size -> variant -> (time_us, busbw, speedup)
    order = []
    for b in data["benchmarks"]:
        m = re.match(r"([^/]+)/bytes:(\d+)/", b["name"])
        if not m:
            continue
        variant, size = m.group(1), int(m.group(2))
        if variant not in order:
            order.append(variant)
        rows[size][variant] = (b["time_us"], b["busbw_GBps"], b["speedup_vs_nccl"])
    return data.get("context", {}), rows, order


# (variant, sizes (None: every size the run has from 64 KiB), the speedup over NCCL it must reach)
TARGETS = [
    ("echo_int4", [1 << 30], 3.2),
    ("echo_int4", [16 << 20], 2.5),
    ("echo_int4_ef", [1 << 30], 2.8),
    ("echo_int8", [1 << 30], 1.9),
    ("echo_none", [256 << 20, 1 << 30], 1.0),
    ("echo_dispatch", None, 1.0),
    ("echo_nccl_dispatch", None, 1.0),
]


def targets(runs, rows):
    print("\n| target | size | mean speedup | worst pass | met (mean) |\n|---|---|---|---|---|")
    for variant, sizes, need in TARGETS:
        for size in sizes or sorted(s for s in rows if s >= 64 << 10):
            cells = [r[1][size][variant][2] for r in runs if variant in r[1].get(size, {})]
            if not cells:
                print(f"| {variant} >= {need}x | {human(size)} | not in the run | | |")
                continue
            mean = sum(cells) / len(cells)
            print(f"| {variant} >= {need}x | {human(size)} | {mean:.2f}x | {min(cells):.2f}x | {'yes' if mean >= need else 'NO'} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json", nargs="+")
    ap.add_argument("--plot")
    ap.add_argument("--variants")
    ap.add_argument("--targets", action="store_true", help="also print the speed targets")
    args = ap.parse_args()
    runs = [load(j) for j in args.json]
    raw = [load(j) for j in args.json]  # per pass, before the mean below
    ctx, rows, order = runs[0]
    spread = {}
    if len(runs) > 1:  # the mean of every pass that has the cell; spread: half the speedups' range
        for size in rows:
            for v in rows[size]:
                cells = [r[1][size][v] for r in runs if v in r[1].get(size, {})]
                sps = [c[2] for c in cells]
                rows[size][v] = tuple(sum(c[k] for c in cells) / len(cells) for k in range(3))
                spread[(size, v)] = (max(sps) - min(sps)) / 2
    if args.variants:
        order = [v for v in args.variants.split(",") if v in order]
    label = ctx.get("echo_bench_label") or "nvlink"
    passes = f", mean of {len(runs)} passes (+- half the speedup's range)" if len(runs) > 1 else ""
    print(f"Run: {ctx.get('date', '?')}, label {label}{passes}; cell = time (us) / busbw (GB/s) / speedup vs NCCL\n")
    print("| size | " + " | ".join(order) + " |")
    print("|---|" + "---|" * len(order))
    for size in sorted(rows):
        cells = []
        for v in order:
            if v in rows[size]:
                t, bw, sp = rows[size][v]
                pm = f" +-{spread[(size, v)]:.2f}" if (size, v) in spread else ""
                cells.append(f"{t:.1f} / {bw:.0f} / {sp:.2f}x{pm}")
            else:
                cells.append("-")
        print(f"| {human(size)} | " + " | ".join(cells) + " |")
    if args.targets:
        targets(raw, rows)
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(8, 4.5))
        sizes = sorted(rows)
        for v in order:
            ys = [rows[s][v][2] if v in rows[s] else None for s in sizes]
            ax.plot([s for s, y in zip(sizes, ys) if y], [y for y in ys if y], marker="o", label=v)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes)
        ax.set_xticklabels([human(s) for s in sizes], rotation=30)
        ax.axhline(1.0, color="gray", lw=0.8)
        ax.set_ylabel("speedup over NCCL bf16 all-reduce")
        ax.set_title(f"Echo vs NCCL, {label}, bf16 ({ctx.get('date', '')[:10]})")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)


if __name__ == "__main__":
    main()
