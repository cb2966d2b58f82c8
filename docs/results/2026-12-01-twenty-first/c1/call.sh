#!/usr/bin/env bash
# Twenty-first session, call 1 (one H200, P = 2 ranks sharing it): this tree (tree.txt: the
# flag check's refinement, collective construction, the Python front's agreement). Every P = 2
# GPU test but transport/nccl (NCCL refuses two ranks on one GPU), the soak at 2000 calls an
# object; then the torch ops built on the device and python/tests (test_gpu at ECHO_TEST_RANKS=2,
# test_front_cpu + test_reference: torch is here, not in CI).
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s); root=$(pwd)
S=.gpubin/s21
cp $S/tree1.txt $R/tree.txt
tar -xJf $S/c1.tar.xz
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv; python3 -c "import torch; print(torch.__version__)"; } > $R/machine.txt 2>&1
export ECHO_TEST_RANKS=2
ECHO_SOAK_CALLS=2000 timeout 240 ctest --test-dir build -L gpu -LE ranks -E "transport/nccl" --output-on-failure > $R/ctest-p2.log 2>&1; echo "ctest p2 rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
tar -czf $OUT/c1-tests.tar.gz -C $OUT r
ECHO_BUILD_TORCH=ON timeout 240 python3 -m pip install --no-build-isolation --no-deps -v ./python > $R/pip.log 2>&1; echo "pip rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
(cd /tmp && ECHO_TEST_RANKS=2 timeout 150 python3 -X faulthandler -m pytest -rs -v -p no:cacheprovider $root/python/tests/test_gpu.py) > $R/pytest-gpu.log 2>&1; echo "pytest gpu rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
(cd /tmp && timeout 120 python3 -X faulthandler -m pytest -rs -v -p no:cacheprovider $root/python/tests/test_front_cpu.py $root/python/tests/test_reference.py) > $R/pytest-cpu.log 2>&1; echo "pytest front rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
cat $R/times.txt; grep -E "Test +#|tests passed|tests failed" $R/ctest-p2.log; tail -15 $R/pytest-gpu.log; tail -15 $R/pytest-cpu.log
tar -czf $OUT/c1.tar.gz -C $OUT r
