#!/usr/bin/env bash
# Twentieth session, call 2 (one H200, P = 2 ranks sharing it): the torch ops built on the device
# from this tree (tree.txt: the review's fixes in the core and the Python front), then
# python/tests at ECHO_TEST_RANKS=2: test_gpu.py (the ops on the GPU) and test_front_cpu.py /
# test_reference.py (the front over gloo with the reference backend: torch is here, not in CI).
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s); root=$(pwd)
cp .gpubin/s20/tree2.txt $R/tree.txt
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv; python3 -c "import torch; print(torch.__version__)"; } > $R/machine.txt 2>&1
ECHO_BUILD_TORCH=ON timeout 300 python3 -m pip install --no-build-isolation --no-deps -v ./python > $R/pip.log 2>&1; echo "pip rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
(cd /tmp && ECHO_TEST_RANKS=2 timeout 200 python3 -X faulthandler -m pytest -rs -v -p no:cacheprovider $root/python/tests/test_gpu.py) > $R/pytest-gpu.log 2>&1; echo "pytest gpu rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
(cd /tmp && timeout 120 python3 -X faulthandler -m pytest -rs -v -p no:cacheprovider $root/python/tests/test_front_cpu.py $root/python/tests/test_reference.py) > $R/pytest-cpu.log 2>&1; echo "pytest front rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
cat $R/times.txt; tail -25 $R/pytest-gpu.log; tail -15 $R/pytest-cpu.log
tar -czf $OUT/c2.tar.gz -C $OUT r
