#!/usr/bin/env bash
# Twentieth session, call 2 (one H200, P = 2 ranks sharing it): the torch ops built on the device
# from this tree (tree.txt: the review's fixes in the core and the Python front), then
# python/tests at ECHO_TEST_RANKS=2: test_gpu.py (the ops on the GPU) and test_front_cpu.py /
# test_reference.py (the front over gloo with the reference backend: torch is here, not in CI).
# Before those: the new fault tests built against the code before the fixes (894690f's include/
# plus only the test's workspace() accessor: they must fail there), and an echo-perf A/B of the
# flags' two stores against one (old = 894690f, new = this tree), 2 passes, 64 KiB to 1 GiB.
set -uo pipefail
R=$OUT/r; mkdir -p $R; t0=$(date +%s); root=$(pwd)
cp .gpubin/s20/tree2.txt $R/tree.txt
S=.gpubin/s20; mkdir -p /tmp/b && for f in old new of; do tar -xJf $S/$f.tar.xz -C /tmp/b; done
export ECHO_TEST_RANKS=2
for tc in "epochs*" "an error the caller*"; do
  timeout 90 /tmp/b/build-of/echo_test_collective_faults -tc="$tc" > "$R/faults-old-${tc%%\**}.log" 2>&1; echo "old faults '$tc' rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
done
for pass in 1 2; do
  for b in old new; do
    bin=/tmp/b/build-old/benchmark/echo-perf; [ $b = new ] && bin=/tmp/b/build/benchmark/echo-perf
    for c in "int4:-B 4" "int4_ef:-B 4 -c error_feedback" "int8:-B 8" "none16:-q none"; do
      timeout 60 $bin -g 2 -S 1 -N 0 -b 64K -e 1G -f 4 -n 20 -w 5 ${c#*:} > $R/perf-build-$b-${c%%:*}-$pass.log 2>&1
    done
  done
  echo "ab pass $pass at $(( $(date +%s) - t0 ))" >> $R/times.txt
done
python3 scripts/perf_ab.py $R build-old,build-new > $R/ab.txt 2>&1
tar -czf $OUT/c2-ab.tar.gz -C $OUT r
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv; python3 -c "import torch; print(torch.__version__)"; } > $R/machine.txt 2>&1
ECHO_BUILD_TORCH=ON timeout 300 python3 -m pip install --no-build-isolation --no-deps -v ./python > $R/pip.log 2>&1; echo "pip rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
(cd /tmp && ECHO_TEST_RANKS=2 timeout 200 python3 -X faulthandler -m pytest -rs -v -p no:cacheprovider $root/python/tests/test_gpu.py) > $R/pytest-gpu.log 2>&1; echo "pytest gpu rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
(cd /tmp && timeout 120 python3 -X faulthandler -m pytest -rs -v -p no:cacheprovider $root/python/tests/test_front_cpu.py $root/python/tests/test_reference.py) > $R/pytest-cpu.log 2>&1; echo "pytest front rc=$? at $(( $(date +%s) - t0 ))" >> $R/times.txt
cat $R/times.txt; cat $R/ab.txt; grep -E "ERROR|Status|test cases" $R/faults-old-*.log | head -20; tail -25 $R/pytest-gpu.log; tail -15 $R/pytest-cpu.log
tar -czf $OUT/c2.tar.gz -C $OUT r
