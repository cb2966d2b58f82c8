#!/usr/bin/env python3
"""Table of ncu's metrics for the fused pipeline kernel: scripts/pipeline-profile.sh runs it.

usage: pipeline_profile.py RANKS CSV...   (each CSV named <config>-<size>.csv, size like 256M)
Each CSV holds one workload: one graph with one call of every rank (echo-perf -S 1 -P 1). Per
value = per element of every rank's input (RANKS x size / 2 for bf16). Instructions include the
ones a warp spends spinning on a peer's flag.
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


def main():
    ranks = int(sys.argv[1])
    print("| config | size | ncu time (us) | warp inst / value | thread inst / value | DRAM read B / value "
          "| DRAM write B / value | L2 B / value | local ld+st | SM % | DRAM % |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for path in sys.argv[2:]:
        m = re.match(r"(.+)-(\d+)([KMG])\.csv$", os.path.basename(path))
        if not m:
            continue
        name, size = m.group(1), int(m.group(2)) * UNITS[m.group(3)]
        s = metrics_of(path)
        if not s:
            print(f"| {name} | {m.group(2)}{m.group(3)} | no metrics (see {name}-{m.group(2)}{m.group(3)}.err) |")
            continue
        values = ranks * size / 2.0
        g = lambda k: s.get(k, float("nan"))
        print(f"| {name} | {m.group(2)}{m.group(3)} | {g('gpu__time_duration.sum') / 1e3:.1f} "
              f"| {g('smsp__inst_executed.sum') / values:.3f} | {g('smsp__thread_inst_executed.sum') / values:.1f} "
              f"| {g('dram__bytes_read.sum') / values:.3f} | {g('dram__bytes_write.sum') / values:.3f} "
              f"| {g('lts__t_bytes.sum') / values:.3f} "
              f"| {g('smsp__sass_inst_executed_op_local_ld.sum') + g('smsp__sass_inst_executed_op_local_st.sum'):.0f} "
              f"| {g('sm__throughput.avg.pct_of_peak_sustained_elapsed'):.1f} "
              f"| {g('dram__throughput.avg.pct_of_peak_sustained_elapsed'):.1f} |")


if __name__ == "__main__":
    main()
