#!/usr/bin/env python3
"""The before / after table of tools/bench-ab.sh: one row per variant and size.

    python3 tools/bench_ab_report.py OUTDIR > table.md

Cell values are speedups over NCCL in the same pass (time_us in brackets, the mean over passes).
'spread' is the larger of the two sides' pass-to-pass spread of the speedup; 'change' is
after / before - 1 of the mean speedups; the verdict says 'slower' only when the change is
below -spread (slower by more than the noise this run measured), 'faster' above +spread.
"""
import glob
import json
import os
import re
import sys
from collections import defaultdict

RENAME = {"echo_none16": "echo_none"}  # the 16-bit pipeline's name before 2026-11-30


def load(path):
    rows = {}
    for b in json.load(open(path))["benchmarks"]:
        m = re.match(r"([^/]+)/bytes:(\d+)/", b["name"])
        if m and "time_us" in b:
            rows[(RENAME.get(m.group(1), m.group(1)), int(m.group(2)))] = float(b["time_us"])
    return rows


def main():
    out = sys.argv[1]
    side = {"before": [], "after": []}
    for s in side:
        for f in sorted(glob.glob(os.path.join(out, f"{s}-*.json"))):
            if re.fullmatch(rf"{s}-\d+\.json", os.path.basename(f)):  # the passes, not extra runs
                side[s].append(load(f))
    speed = {s: defaultdict(list) for s in side}
    time = {s: defaultdict(list) for s in side}
    for s, passes in side.items():
        for rows in passes:
            for (v, size), t in rows.items():
                nccl = rows.get(("nccl", size))
                if nccl and v != "nccl":
                    speed[s][(v, size)].append(nccl / t)
                time[s][(v, size)].append(t)
    keys = sorted(set(speed["before"]) & set(speed["after"]), key=lambda k: (k[0], k[1]))
    print(f"passes: {len(side['before'])} before, {len(side['after'])} after\n")
    print("| variant | size | before | after | change | spread | verdict |")
    print("|---|---|---|---|---|---|---|")
    for v, size in keys:
        b, a = speed["before"][(v, size)], speed["after"][(v, size)]
        mb, ma = sum(b) / len(b), sum(a) / len(a)
        spread = max((max(x) - min(x)) / (sum(x) / len(x)) for x in (b, a))
        change = ma / mb - 1
        verdict = "slower" if change < -spread else "faster" if change > spread else "within noise"
        tb = sum(time["before"][(v, size)]) / len(b)
        ta = sum(time["after"][(v, size)]) / len(a)
        mib = (f"{size} B" if size < 1 << 10 else f"{size >> 10} KiB" if size < 1 << 20 else
               f"{size >> 20} MiB" if size < 1 << 30 else f"{size >> 30} GiB")
        print(f"| {v} | {mib} | {mb:.2f}x ({tb:.0f} us) | {ma:.2f}x ({ta:.0f} us) | {100 * change:+.1f} % | "
              f"{100 * spread:.1f} % | {verdict} |")
    for s in side:
        n = [rows.get(("nccl", size)) for rows in side[s] for size in sorted({k[1] for k in rows})]
        print(f"\nNCCL, {s}: " + ", ".join(f"{t:.0f}" for t in n if t) + " us (each pass, each size)")


if __name__ == "__main__":
    main()
