#!/usr/bin/env bash
# Nineteenth session, call 5 (one H200, P = 2 on the one GPU): the torch ops built on the device
# from the final tree (tree.txt; include/ byte-identical to 29d422b, whose codec changes of the
# seventeenth session the torch tests had not run on) and python/tests/test_gpu.py at
# ECHO_TEST_RANKS=2.
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s); root=$(pwd)
git rev-parse HEAD > $R/tree.txt 2>/dev/null || cp docs/results/2026-12-01-nineteenth/c5/tree.txt $R/
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv; python3 -c "import torch; print(torch.__version__)"; } > $R/machine.txt 2>&1
ECHO_BUILD_TORCH=ON timeout 300 python3 -m pip install --no-build-isolation --no-deps -v ./python > $R/pip.log 2>&1; echo "pip rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
(cd /tmp && ECHO_TEST_RANKS=2 timeout 240 python3 -X faulthandler -m pytest -rs -v -p no:cacheprovider $root/python/tests/test_gpu.py) > $R/pytest-gpu.log 2>&1; echo "pytest rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
cat $R/times.txt; tail -25 $R/pytest-gpu.log
tar -czf $OUT/c5.tar.gz -C $OUT r
