#!/usr/bin/env python3
"""Table of ncu's metrics for the fused pipeline kernel: tools/pipeline-profile.sh runs it.

usage: pipeline_profile.py RANKS CSV...   (<config>-<size>.csv, size like 256M; stalls-<config>.csv)
Each CSV holds one workload: one graph with one call of every rank (echo-perf -S 1 -P 1). Per
value = per element of every rank's input (RANKS x size / 2 for bf16). Instructions include the
ones a warp spends spinning on a peer's flag. stalls-<config>.csv: cycles between two issued
instructions of a warp, by the reason it was not issued (ncu's warp-state sampling metrics).
"""
import csv
import os
import re
import sys
from collections import defaultdict

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def metrics_of(path):
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # drop ncu's "==PROF==" lines
    sums = defaultdict(float)
    for row in csv.DictReader(lines):
        try:
            sums[row["Metric Name"]] += float(row["Metric Value"].replace(",", ""))
        except (KeyError, ValueError):
            pass
    return sums


def stall_table(paths):
    rows = {}
    for path in paths:
        name = os.path.basename(path)[len("stalls-"):-len(".csv")]
        pre, post = "smsp__average_warps_issue_stalled_", "_per_issue_active.ratio"
        rows[name] = {k[len(pre):-len(post)]: v for k, v in metrics_of(path).items()
                      if k.startswith(pre) and k.endswith(post)}
    rows = {k: v for k, v in rows.items() if v}
    if not rows:
        return
    reasons = sorted({r for v in rows.values() for r in v}, key=lambda r: -max(v.get(r, 0) for v in rows.values()))
    reasons = [r for r in reasons if max(v.get(r, 0) for v in rows.values()) >= 0.05]
    print()
    print("Cycles between two issued instructions of a warp, by why it waited:")
    print()
    print("| config | total | " + " | ".join(reasons) + " |")
    print("|---|---|" + "---|" * len(reasons))
    for name, v in rows.items():
        print(f"| {name} | {sum(v.values()):.2f} | " + " | ".join(f"{v.get(r, 0):.2f}" for r in reasons) + " |")


def main():
    if len(sys.argv) < 3 or not sys.argv[1].isdigit() or int(sys.argv[1]) < 1:
        sys.exit("usage: pipeline_profile.py RANKS CSV...   (RANKS a positive integer)")
    ranks = int(sys.argv[1])
    # (spills: range replay cannot count local loads and stores; cuobjdump's resources.txt has them)
    print("| config | size | ncu time (us) | warp inst / value | thread inst / value | DRAM read B / value "
          "| DRAM write B / value | L2 B / value | SM % | DRAM % |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for path in sys.argv[2:]:
        m = re.match(r"(.+)-(\d+)([KMG])\.csv$", os.path.basename(path))
        if not m:
            continue
        name, size = m.group(1), int(m.group(2)) * UNITS[m.group(3)]
        if size == 0:
            continue
        s = metrics_of(path)
        if not s:
            print(f"| {name} | {m.group(2)}{m.group(3)} | no metrics (see the CSV and the .err of that name) |")
            continue
        values = ranks * size / 2.0
        g = lambda k: s.get(k, float("nan"))
        print(f"| {name} | {m.group(2)}{m.group(3)} | {g('gpu__time_duration.sum') / 1e3:.1f} "
              f"| {g('smsp__inst_executed.sum') / values:.3f} | {g('smsp__thread_inst_executed.sum') / values:.1f} "
              f"| {g('dram__bytes_read.sum') / values:.3f} | {g('dram__bytes_write.sum') / values:.3f} "
              f"| {g('lts__t_bytes.sum') / values:.3f} "
              f"| {g('sm__throughput.avg.pct_of_peak_sustained_elapsed'):.1f} "
              f"| {g('dram__throughput.avg.pct_of_peak_sustained_elapsed'):.1f} |")


if __name__ == "__main__":
    main()
    stall_table([p for p in sys.argv[2:] if os.path.basename(p).startswith("stalls-")])
