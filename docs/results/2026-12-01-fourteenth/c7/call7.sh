#!/usr/bin/env bash
# Fourteenth session, call 7 (one H200): the torch ops built on the GPU machine (pip, as
# scripts/gpu-check.sh's pybuild stage does) and python/tests/test_gpu.py with its two ranks sharing
# the GPU (ECHO_TEST_RANKS=2: a gloo group, the cuda backend asked for explicitly).
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s)
cp .gpubin/s14/tree.txt $R/tree.txt
export PATH=$PATH:/usr/local/cuda/bin
ECHO_BUILD_TORCH=ON MAX_JOBS=16 CMAKE_BUILD_PARALLEL_LEVEL=16 timeout 240 python3 -m pip install --no-build-isolation --no-deps -v ./python > $R/pip.log 2>&1
echo "pip rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
python3 -c "import torch; from echo_allreduce import ops; print('torch', torch.__version__, 'ops:', ops.ops_available(), ops._error or '')" > $R/ops.txt 2>&1
root=$(pwd); (cd /tmp && ECHO_TEST_RANKS=2 timeout 330 python3 -X faulthandler -m pytest -rs -v -p no:cacheprovider $root/python/tests/test_gpu.py) > $R/pytest-gpu.log 2>&1
echo "pytest rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
cat $R/times.txt $R/ops.txt; tail -25 $R/pytest-gpu.log
tar -czf $OUT/c7.tar.gz -C $OUT r
