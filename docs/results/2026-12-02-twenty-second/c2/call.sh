#!/usr/bin/env bash
# Twenty-second session, call 2 (one H200, ranks sharing it; tree.txt): the Python front after a
# review (every local step of a reference call before the verdicts' exchange, no reference cycles,
# the refusal test at the refused calls' own n and type) and tp_layers.launch's GPU check: torch
# ops built on the device, python/tests (test_gpu at ECHO_TEST_RANKS=2) and examples/python/tests;
# then the C++ soak (binary of build/ at the same C++ tree as the twenty-first session's c1,
# carried as .gpubin/s22/soak.tar.xz) with fresh seeds: P = 2 at 8000 calls an object, then P = 3 at 2000.
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s); root=$(pwd)
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv; python3 -c "import torch; print(torch.__version__)"; } > $R/machine.txt 2>&1
tar -xJf .gpubin/s22/soak.tar.xz
ECHO_BUILD_TORCH=ON timeout 240 python3 -m pip install --no-build-isolation --no-deps -v ./python > $R/pip.log 2>&1; echo "pip rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
(cd /tmp && ECHO_TEST_RANKS=2 timeout 150 python3 -X faulthandler -m pytest -rs -v -p no:cacheprovider $root/python/tests/test_gpu.py) > $R/pytest-gpu.log 2>&1; echo "pytest gpu rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
(cd /tmp && timeout 150 python3 -X faulthandler -m pytest -rs -v -p no:cacheprovider $root/python/tests/test_front_cpu.py $root/python/tests/test_reference.py $root/examples/python/tests) > $R/pytest-cpu.log 2>&1; echo "pytest cpu rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
left=$(( 570 - ($(date +%s) - t0) ))
ECHO_TEST_RANKS=2 ECHO_SOAK_CALLS=8000 timeout $(( left - 60 )) build/test/gpu/echo_test_collective_soak > $R/soak-p2.log 2>&1; echo "soak p2 rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
left=$(( 575 - ($(date +%s) - t0) ))
ECHO_TEST_RANKS=3 ECHO_SOAK_CALLS=2000 timeout $left build/test/gpu/echo_test_collective_soak > $R/soak-p3.log 2>&1; echo "soak p3 rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
cat $R/times.txt; tail -14 $R/pytest-gpu.log; tail -4 $R/pytest-cpu.log; tail -6 $R/soak-p2.log; tail -6 $R/soak-p3.log
