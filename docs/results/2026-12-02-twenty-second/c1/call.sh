#!/usr/bin/env bash
# Twenty-second session, call 1 (one H200, P = 2 ranks sharing it; tree.txt): the torch ops built
# on the device from this tree (the NCCL communicator made collectively), then python/tests:
# test_gpu at ECHO_TEST_RANKS=2 (with the new random sequence on long-lived objects, 240 calls and
# 1000), test_front_cpu (the reference backend's exchanged verdicts) and test_reference.
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s); root=$(pwd)
git log -1 --format=%H > $R/tree.txt 2>/dev/null || true
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv; python3 -c "import torch; print(torch.__version__)"; } > $R/machine.txt 2>&1
ECHO_BUILD_TORCH=ON timeout 240 python3 -m pip install --no-build-isolation --no-deps -v ./python > $R/pip.log 2>&1; echo "pip rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
(cd /tmp && ECHO_TEST_RANKS=2 timeout 200 python3 -X faulthandler -m pytest -rs -v -p no:cacheprovider $root/python/tests/test_gpu.py) > $R/pytest-gpu.log 2>&1; echo "pytest gpu rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
(cd /tmp && timeout 120 python3 -X faulthandler -m pytest -rs -v -p no:cacheprovider $root/python/tests/test_front_cpu.py $root/python/tests/test_reference.py $root/examples/python/tests) > $R/pytest-cpu.log 2>&1; echo "pytest front rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
(cd /tmp && ECHO_TEST_RANKS=2 ECHO_PY_SOAK_CALLS=1000 timeout 150 python3 -X faulthandler -m pytest -rs -v -p no:cacheprovider $root/python/tests/test_gpu.py -k random_sequence) > $R/pytest-soak1000.log 2>&1; echo "pytest soak 1000 rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
cat $R/times.txt; tail -25 $R/pytest-gpu.log; tail -8 $R/pytest-cpu.log; tail -5 $R/pytest-soak1000.log
tar -czf $OUT/c1.tar.gz -C $OUT r
