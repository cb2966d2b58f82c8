#!/usr/bin/env bash
# Twenty-first session, call 7 (one H200; the last device minutes): the Python front's fixes of a
# second review (tree.txt). The package built without the torch ops (ECHO_BUILD_TORCH=OFF: the
# reference module only, to fit the time left), then test_front_cpu.py's tests of what changed
# (2 ranks over gloo, reference and off backends).
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s); root=$(pwd)
cp .gpubin/s21/tree2.txt $R/tree.txt
ECHO_BUILD_TORCH=OFF timeout 120 python3 -m pip install --no-build-isolation --no-deps -v ./python > $R/pip.log 2>&1; echo "pip rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
(cd /tmp && timeout 120 python3 -X faulthandler -m pytest -rs -v -p no:cacheprovider $root/python/tests/test_front_cpu.py -k "misuse or env_switch or mismatched or refused or bit_identical or deferred or autograd") > $R/pytest-front.log 2>&1; echo "pytest front rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
cat $R/times.txt; tail -20 $R/pytest-front.log
tar -czf $OUT/c7.tar.gz -C $OUT r
