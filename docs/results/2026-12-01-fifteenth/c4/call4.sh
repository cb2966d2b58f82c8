#!/usr/bin/env bash
# Fifteenth session, call 4 (one H200, P = 2 on the one GPU).
# 1. ncu on 4-bit + EF forced wide at 256 MiB under the lean policy: ep-v1 (c1's v1, without the
#    clamp-free codec path) against ep-lean-ongrid (c2's build, with it; 2.2x slower in c2 / c3):
#    why warps stall, and instructions.
# 2. The torch ops built here from the working tree (tree.txt: the clamp-free path, the finite-error
#    shortcut, stateful calls back on the heavy wide policy) and python/tests/test_gpu.py at
#    ECHO_TEST_RANKS=2 (the fourteenth session's last two test edits had not run).
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s); root=$(pwd)
cp .gpubin/s15/tree.txt $R/
mkdir -p /tmp/b && tar -xJf .gpubin/s15/c4.tar.xz -C /tmp/b
E="-g 2 -S 1 -N 0 -q zero_aware -B 4 -c error_feedback -W 256M -b 256M -e 256M"
stalls='regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio'
metrics=smsp__inst_executed.sum,smsp__thread_inst_executed.sum,gpu__time_duration.sum,sm__warps_active.avg.per_cycle_active
for b in v1 lean-ongrid; do
  timeout 60 /tmp/b/ep-$b $E -n 20 -w 5 > $R/perf-$b.log 2>&1
  timeout 120 ncu --graph-profiling graph --profile-from-start off --clock-control none --metrics "$stalls,$metrics" \
    --csv --print-units base /tmp/b/ep-$b $E -P 1 -n 3 -w 1 > $R/ncu-$b.csv 2> $R/ncu-$b.err
  echo "ncu $b rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
done
python3 - "$R" <<'PY' | tee $R/ncu-table.txt
import csv, sys, glob, os
rows = {}
for f in sorted(glob.glob(sys.argv[1] + "/ncu-*.csv")):
    b = os.path.basename(f)[4:-4]
    lines = [l for l in open(f) if l.startswith('"')]
    for r in csv.DictReader(lines):
        try: rows.setdefault(r["Metric Name"], {})[b] = rows.get(r["Metric Name"], {}).get(b, 0.0) + float(r["Metric Value"])
        except (KeyError, ValueError): pass
for m in sorted(rows):
    print(f"{m:90s} " + "  ".join(f"{b} {v:14.3f}" for b, v in sorted(rows[m].items())))
PY
ECHO_BUILD_TORCH=ON timeout 200 python3 -m pip install --no-build-isolation --no-deps -v ./python > $R/pip.log 2>&1; echo "pip rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
(cd /tmp && ECHO_TEST_RANKS=2 timeout 200 python3 -X faulthandler -m pytest -rs -v -p no:cacheprovider $root/python/tests/test_gpu.py) > $R/pytest-gpu.log 2>&1; echo "pytest rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
cat $R/times.txt; tail -15 $R/pytest-gpu.log
tar -czf $OUT/c4.tar.gz -C $OUT r
