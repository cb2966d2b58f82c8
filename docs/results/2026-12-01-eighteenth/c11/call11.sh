#!/usr/bin/env bash
# Eighteenth session, call 11 (one H200): scripts/probe/ring_l2_probe.cu with its in-band-flag
# variant and the exchange variant (every warp produces its chunk and consumes its partner warp's
# chunk `lag` iterations later, flags in the lines, with and without a discard); ncu HBM bytes.
set -uo pipefail
R=$OUT/r; mkdir -p $R
nvcc -O3 -arch=sm_90 -std=c++17 -o /tmp/ring_l2_probe scripts/probe/ring_l2_probe.cu > $R/build.log 2>&1 || { cat $R/build.log; exit 1; }
/tmp/ring_l2_probe 1024 | tee $R/probe.txt
RING_PROBE_REPS=1 timeout 300 ncu --print-units base --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum,lts__t_bytes.sum --csv /tmp/ring_l2_probe 1024 > $R/ncu.csv 2> $R/ncu.err
python3 - "$R/ncu.csv" <<'PY' | tee $R/ncu-table.txt
import csv, sys, collections
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
h = rows[0]; idx = {k: h.index(k) for k in ("ID", "Kernel Name", "Metric Name", "Metric Value")}
per = collections.defaultdict(dict)
for r in rows[1:]:
    per[(int(r[idx["ID"]]), r[idx["Kernel Name"]])][r[idx["Metric Name"]]] = float(r[idx["Metric Value"]].replace(",", ""))
n = 1024 * 2**20 / 2
print("id kernel dram_read_B/value dram_write_B/value L2_B/value time_ns")
for (i, k), m in sorted(per.items()):
    print(i, k.split("(")[0], "%.3f %.3f %.3f %s" % (m.get("dram__bytes_read.sum", 0) / n, m.get("dram__bytes_write.sum", 0) / n, m.get("lts__t_bytes.sum", 0) / n, m.get("gpu__time_duration.sum")))
PY
