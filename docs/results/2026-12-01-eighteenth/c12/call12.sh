#!/usr/bin/env bash
# Eighteenth session, call 12 (one H200): the committed benchmark/ring_l2_probe.cu (helpers folded,
# same kernel SASS opcode counts as c11's) built and run once, to check it as committed.
set -uo pipefail
R=$OUT/r; mkdir -p $R
nvcc -O3 -arch=sm_90 -std=c++17 -o /tmp/echo-ring-l2-probe benchmark/ring_l2_probe.cu > $R/build.log 2>&1 || { cat $R/build.log; exit 1; }
/tmp/echo-ring-l2-probe 1024 | tee $R/probe.txt
