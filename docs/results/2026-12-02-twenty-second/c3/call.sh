#!/usr/bin/env bash
# Twenty-second session, call 3 (one H200, ranks sharing it; tree.txt): the front's last change
# (one exchange of verdicts for construction and reference calls): the torch ops built on the
# device, then test_gpu (ECHO_TEST_RANKS=2) and test_front_cpu.
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s); root=$(pwd)
ECHO_BUILD_TORCH=ON timeout 200 python3 -m pip install --no-build-isolation --no-deps -v ./python > $R/pip.log 2>&1; echo "pip rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
(cd /tmp && ECHO_TEST_RANKS=2 timeout 140 python3 -X faulthandler -m pytest -rs -v -p no:cacheprovider $root/python/tests/test_gpu.py) > $R/pytest-gpu.log 2>&1; echo "pytest gpu rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
(cd /tmp && timeout 100 python3 -X faulthandler -m pytest -rs -v -p no:cacheprovider $root/python/tests/test_front_cpu.py) > $R/pytest-front.log 2>&1; echo "pytest front rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
cat $R/times.txt; tail -4 $R/pytest-gpu.log; tail -4 $R/pytest-front.log
