#!/usr/bin/env python3
"""Table of ncu's metrics for echo-codec-profile's kernels: tools/codec-profile.sh runs it.

usage: codec_profile.py NCU_CSV VALUES_PER_KERNEL
Every kernel ran several times; the table shows the median of each metric per kernel and
configuration, and thread instructions a value = smsp__thread_inst_executed.sum / values.
"""
import csv
import statistics
import sys
from collections import defaultdict


def config_of(name):
    # ncu prints the template arguments without namespaces: tile_config<none, ...> is quant::none
    q = ("int4" if "zero_aware<4" in name else "int8" if "zero_aware<8" in name
         else "none16" if "tile_config<none," in name or "quant::none" in name else "?")
    # error_feedback's state: step8 (the default) "_ef", bf16 "_ef16", int8 codes "_ef8"
    ef = ("_ef16" if "error_feedback<bfloat16_t" in name else "_ef8" if "int_state<8" in name
          else "_ef" if "error_feedback" in name else "")
    q += ("_rot" if "rotated<" in name else "") + ("_clip" if "clipped<" in name else "")
    stage = next((s for s in ("push", "reduce", "gather") if s + "_kernel" in name), "?")
    return q + ef, stage


def main():
    path, values = sys.argv[1], float(sys.argv[2])
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]  # drop ncu's "==PROF==" lines
    rows = list(csv.DictReader(lines))
    by = defaultdict(lambda: defaultdict(list))
    for r in rows:
        try:
            v = float(r["Metric Value"].replace(",", ""))
        except ValueError:
            continue
        by[config_of(r["Kernel Name"])][r["Metric Name"]].append(v)
    order = ["int4", "int4_ef", "int4_ef16", "int4_ef8", "int4_rot", "int4_rot_ef", "int4_rot_clip", "int4_rot_clip_ef8",
             "int8", "int8_ef", "none16"]
    print("| config | kernel | thread instr / value | warp instr / value | registers | local ld / st instr | "
          "time (us) | HBM read + write (B / value) | HBM % of peak | SM % of peak |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for cfg in order:
        for stage in ("push", "reduce", "gather"):
            m = by.get((cfg, stage))
            if not m:
                continue
            med = lambda k: statistics.median(m[k]) if m.get(k) else float("nan")
            print(f"| {cfg} | {stage} | {med('smsp__thread_inst_executed.sum') / values:.1f} | "
                  f"{med('smsp__inst_executed.sum') / values:.2f} | {med('launch__registers_per_thread'):.0f} | "
                  f"{med('smsp__sass_inst_executed_op_local_ld.sum'):.0f} / {med('smsp__sass_inst_executed_op_local_st.sum'):.0f} | "
                  f"{med('gpu__time_duration.sum') / 1e3:.1f} | "
                  f"{(med('dram__bytes_read.sum') + med('dram__bytes_write.sum')) / values:.2f} | "
                  f"{med('dram__throughput.avg.pct_of_peak_sustained_elapsed'):.0f} | "
                  f"{med('sm__throughput.avg.pct_of_peak_sustained_elapsed'):.0f} |")


if __name__ == "__main__":
    main()
