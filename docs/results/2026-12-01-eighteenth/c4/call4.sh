#!/usr/bin/env bash
# Eighteenth session, call 4 (one H200): the HBM rate a plain copy sustains (scripts/dram-rate-probe.py).
set -uo pipefail
R=$OUT/r; mkdir -p $R
git rev-parse --short HEAD > $R/tree.txt 2>/dev/null || true
nvidia-smi --query-gpu=index,name,driver_version,clocks.max.memory,clocks.max.sm --format=csv > $R/machine.txt 2>&1
for m in 1024 256; do python3 scripts/dram-rate-probe.py --mib $m --json $R/dram-rate-$m.json 2>&1 | tee $R/dram-rate-$m.txt; done
