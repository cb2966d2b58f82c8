#!/usr/bin/env bash
# Build Echo on a GPU machine, run the tests and the benchmark in one go (stages run in the order
# ECHO_STAGES names them); logs go to $OUT (the
# device tool's output folder) or ./gpu-logs, bundled as logs-<stages>.tar.gz beside summary.txt.
#
#   scripts/gpu-check.sh                       build + tests + benchmark (default stages)
#   ECHO_STAGES="build test" scripts/gpu-check.sh
#   ECHO_CTEST_ARGS="-LE ranks"                ctest arguments (here: skip the P = 3, 4, 8 entries)
#   ECHO_BENCH_ARGS="--benchmark_filter=int4"  echo_bench arguments
# Stages:
#   build     configure (Release, sm_90) and build everything
#   prebuilt  instead of build: unpack .gpubin/build.tar.xz (a build tree made on another machine
#             at this same path, without object files; ECHO_BUILD_DIR must name it) and check that
#             its programs load; Google Benchmark's shared library may travel in .gpubin/lib
#   test      ctest (host, install and GPU tests; the soak test included)
#   legacy    the soak test built against the headers of an older Echo, carried in .legacy/include
#             (git archive <rev> include | tar -x -C .legacy): shows what the soak finds there
#   sanitize  compute-sanitizer memcheck and synccheck on a short soak and the features test;
#             racecheck on the fault tests
#   bench     benchmark/echo_bench: every variant against NCCL in the same process
#   socket    NCCL forced onto its socket transport over loopback (the stand-in for a link between
#             nodes), transport::nccl variants against NCCL
#   perf      echo_perf (nccl-tests' layout, with error columns), 4-bit with and without error feedback
#   codec     tools/codec-profile.sh: ncu over transport::nccl's staged kernels on one GPU
#             (instructions a value, registers, HBM traffic; codec-table.md to $OUT)
#   pybuild   pip install ./python --no-build-isolation (the numpy binding and the torch ops)
#   pyprebuilt instead of pybuild: the host reference built here into $ECHO_PYSITE (default .pysite),
#             the torch ops library carried in .gpubin/_torch_ops.so.xz (built on another machine
#             against the same torch) put beside it
#   python    the Python package's tests (python/tests, one pytest per file; the GPU ones need torch
#             and 2 GPUs)
#   train     examples/python/train_tp.py (ECHO_TRAIN_ARGS; ECHO_TRAIN_CAP seconds at most, and the
#             same for e2e and smollm), JSON to $OUT/training.json
#   e2e       examples/python/e2e_tp.py (ECHO_E2E_ARGS), JSON to $OUT/e2e.json
#   smollm    examples/python/smollm_tp.py eval (ECHO_SMOLLM_ARGS), JSON to $OUT/smollm.json
#   beside    examples/python/beside_gemm.py (ECHO_BESIDE_ARGS): the all-reduce beside a cuBLAS GEMM
#
# Carrying to the device tool: a path carried by one call is gone in the next unless carried again
# (build trees unpacked from it, and the ignored folders the stages write, stay while the machine
# is warm).
# ECHO_DEADLINE=S: stop starting work S seconds after the script began (each stage is cut at the
# deadline with `timeout`), so a device call with a time limit still bundles what ran.
# NCCL's multicast switches (NCCL_NVLS_ENABLE=0 on our machines) are left exactly as found.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/gpu-logs}
logs=${TMPDIR:-/tmp}/echo-gpu-logs
build=${ECHO_BUILD_DIR:-$root/build-gpu}
stages=${ECHO_STAGES:-build test bench}
rm -rf "$logs"; mkdir -p "$logs" "$out"
cd "$root" || exit 1
summary=$out/summary.txt
deadline=${ECHO_DEADLINE:-0}
# left [cap]: seconds this stage may run (the rest to the deadline, at most cap); 0 = out of time
left() {
  local cap=${1:-100000} l=100000
  [ "$deadline" -gt 0 ] && l=$((deadline - SECONDS))
  [ "$l" -gt "$cap" ] && l=$cap
  [ "$l" -lt 0 ] && l=0
  echo "$l"
}
late() { [ "$(left)" -le 5 ] && { say "$1: skipped, past ECHO_DEADLINE"; return 0; }; return 1; }
say() { echo "$*" | tee -a "$summary"; }
# The logs travel as one archive (the device tool returns few files), refreshed after each stage
# so that a run cut short still returns what it did.
# One archive per invocation (ECHO_BUNDLE names it; default: the stages), the summary appended to.
bundle_name=${ECHO_BUNDLE:-logs-${stages// /-}}
bundle() { tar -czf "$out/$bundle_name.tar.gz" -C "$(dirname "$logs")" "$(basename "$logs")" 2>/dev/null; }
trap bundle EXIT

{
  date -u
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv
  nvidia-smi topo -m
  env | grep -E '^(NCCL|CUDA)_' | sort
} >"$logs/machine.txt" 2>&1
head -4 "$logs/machine.txt" | tee -a "$summary"

rc=0
stage_prebuilt() {
  if [ -f .gpubin/build.tar.xz ]; then
    tar -xJf .gpubin/build.tar.xz || { say "prebuilt: cannot unpack .gpubin/build.tar.xz"; exit 1; }
  elif [ ! -d "$build" ]; then
    say "prebuilt: neither .gpubin/build.tar.xz nor $build"; exit 1
  fi
  [ -d .gpubin/lib ] && export LD_LIBRARY_PATH=$root/.gpubin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  for b in "$build"/test/gpu/echo_test_collective_all_reduce_features "$build"/benchmark/echo_bench; do
    [ -x "$b" ] && ldd "$b" | grep "not found" | tee -a "$summary"
  done
  say "prebuilt: unpacked $(find "$build" -type f -perm -u+x | wc -l) programs"
}
stage_build() {
  gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
  cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 ${ECHO_CMAKE_ARGS:-} \
    >"$logs/configure.log" 2>&1 || { tail -50 "$logs/configure.log"; exit 1; }
  start=$SECONDS
  keep=(); [ ${#gen[@]} -gt 0 ] && keep=(-- -k 0)  # build what can be built; report the rest
  if ! cmake --build "$build" -j"$(nproc)" "${keep[@]}" >"$logs/build.log" 2>&1; then
    rc=1
    grep -E "error|FAILED" "$logs/build.log" | head -40 | tee -a "$summary"
  fi
  say "build: $((SECONDS - start)) s"
  bundle
}
stage_test() {
  start=$SECONDS
  timeout "$(left)" ctest --test-dir "$build" --output-on-failure -j4 ${ECHO_CTEST_ARGS:-} >"$logs/ctest.log" 2>&1 || rc=1
  grep -E "^ *[0-9]+/[0-9]+ Test|tests passed|tests failed|^soak |FIRST:|SKIPPED" "$logs/ctest.log" | tee -a "$summary" | tail -70
  say "test: $((SECONDS - start)) s"
  bundle
}
stage_legacy() {
  if [ ! -x "$build/soak-legacy" ] && [ -d .legacy/include ]; then
    nvcc -std=c++17 -O3 -arch=sm_90 -DECHO_SOAK_LEGACY -I.legacy/include -Itest \
      test/collective/soak.cu test/gpu_main.cu -DECHO_TEST_MIN_GPUS=2 -lnccl -o "$build/soak-legacy" \
      >"$logs/legacy-build.log" 2>&1 || { rc=1; tail -20 "$logs/legacy-build.log"; }
  fi
  if [ -x "$build/soak-legacy" ]; then
    ECHO_SOAK_CALLS=${ECHO_LEGACY_CALLS:-3000} timeout 300 "$build/soak-legacy" -tc='soak: cuda_ipc' >"$logs/legacy-soak.log" 2>&1
    say "legacy soak (expected to find mismatches): exit $?"
    grep -E "^soak |FIRST:" "$logs/legacy-soak.log" | tee -a "$summary"
  else
    say "legacy: no .legacy/include carried and no prebuilt soak-legacy; skipped"
  fi
  bundle
}
# A sanitizer log's summary, split: errors in kernels (memory accesses, barriers, races) and CUDA
# API return codes (with how many of the printed ones were inside libnccl, not Echo's calls).
sanitizer_counts() {
  local kernel api nccl
  kernel=$(grep -c -E "Invalid (__global__|__shared__|__local__)|[Mm]isaligned|[Oo]ut of bounds|Barrier error|Race reported" "$1")
  api=$(grep -c "Program hit" "$1")
  # an API error counts as NCCL's when its report or backtrace names NCCL
  nccl=$(awk '/Program hit/ {n += f; f = 0; p = 1} p && /nccl/ {f = 1} /^========= *$/ {n += f; f = 0; p = 0} END {print n + f}' "$1")
  echo "$(grep -m1 -E 'ERROR SUMMARY' "$1"); printed: $kernel kernel errors, $api API errors ($nccl of them inside NCCL)"
}
stage_sanitize() {
  cs=compute-sanitizer
  command -v $cs >/dev/null || cs=/usr/local/cuda/bin/compute-sanitizer
  for tool in memcheck synccheck; do
    ECHO_SOAK_CALLS=${ECHO_SANITIZE_CALLS:-150} timeout "$(left "${ECHO_SANITIZE_CAP:-280}")" $cs --tool $tool --error-exitcode 9 --print-limit 500 \
      "$build/test/gpu/echo_test_collective_soak" >"$logs/sanitize-$tool-soak.log" 2>&1
    say "compute-sanitizer $tool soak (${ECHO_SANITIZE_CALLS:-150} calls a transport): exit $? $(sanitizer_counts "$logs/sanitize-$tool-soak.log")"
  done
  timeout "$(left "${ECHO_SANITIZE_CAP:-200}")" $cs --tool memcheck --error-exitcode 9 --print-limit 500 "$build/test/gpu/echo_test_collective_all_reduce_features" \
    -tce='*one rank makes*' >"$logs/sanitize-memcheck-features.log" 2>&1
  say "compute-sanitizer memcheck features: exit $? $(sanitizer_counts "$logs/sanitize-memcheck-features.log")"
  timeout "$(left "${ECHO_SANITIZE_CAP:-200}")" $cs --tool racecheck --error-exitcode 9 --print-limit 500 "$build/test/gpu/echo_test_collective_faults" \
    -tc='*bad buffers*,*deferred-update*' >"$logs/sanitize-racecheck-faults.log" 2>&1
  say "compute-sanitizer racecheck faults: exit $? $(grep -E 'RACECHECK SUMMARY|ERROR SUMMARY' "$logs/sanitize-racecheck-faults.log" | head -1)"
}
# What the built modules are linked against, and which unwinder a C++ throw binds to: modules
# built on the GPU image crashed when their C++ code threw (docs/python.md).
py_diagnose() {
  [ "${ECHO_PY_DIAGNOSE:-1}" = 0 ] && return 0  # ECHO_PY_DIAGNOSE=0 skips it (about a minute)
  local pkg
  pkg=$(python3 -c 'import echo_allreduce, os; print(os.path.dirname(echo_allreduce.__file__))' 2>/dev/null) || return 0
  {
    grep -h -E "^CMAKE_(CXX|CUDA)_COMPILER(_VERSION)?:|^CMAKE_CXX_FLAGS:|^CMAKE_(SHARED|MODULE)_LINKER_FLAGS:" \
      python/build/*/CMakeCache.txt 2>/dev/null
    "${CXX:-c++}" --version 2>&1 | head -1
    for m in "$pkg"/*.so; do
      echo "== $m"; ldd "$m"; readelf -d "$m" | grep -E "NEEDED|RPATH|RUNPATH"
      nm -D --defined-only "$m" 2>/dev/null | grep -i -E "unwind|cxa_throw" | head
    done
    LD_DEBUG=bindings python3 -c "from echo_allreduce import reference as R
try: R.ChainState(2, 10, 'int3')
except ValueError as e: print('raised:', e)" 2>&1 | grep -E "_Unwind_RaiseException|__cxa_throw|raised:" | head
  } >"$logs/py-diagnose.log" 2>&1
  local raised="a C++ throw crashed or did not raise"
  grep -q "raised:" "$logs/py-diagnose.log" && raised="a C++ throw raised ValueError cleanly"
  say "py-diagnose: $raised; _Unwind_RaiseException bound to: $(grep -m1 "_Unwind_RaiseException" "$logs/py-diagnose.log" | sed -E 's/.*binding file ([^ ]+) .* to ([^ ]+) .*/\1 -> \2/')"
  timeout 300 scripts/py-crash-probe.sh "$logs" "$pkg" 2>&1 | tee "$logs/py-crash-probe.log" | tee -a "$summary"
}
stage_pybuild() {
  start=$SECONDS
  ECHO_BUILD_TORCH=ON python3 -m pip install --no-build-isolation --no-deps -v ./python >"$logs/pip.log" 2>&1
  say "pybuild: exit $? in $((SECONDS - start)) s"
  py_diagnose
  bundle
}
stage_pyprebuilt() {
  start=$SECONDS
  site=${ECHO_PYSITE:-$root/.pysite}
  if ! ls "$site"/echo_allreduce/_reference*.so >/dev/null 2>&1; then
    ECHO_BUILD_TORCH=OFF python3 -m pip install -v --no-build-isolation --no-deps --target "$site" ./python \
      >"$logs/pip.log" 2>&1 || { rc=1; tail -20 "$logs/pip.log" | tee -a "$summary"; }
  fi
  # the torch ops from this call's carry (.gpubin, or .carry where a call has no room for .gpubin),
  # unpacked every time: a copy left from an earlier call was once found truncated
  local ops
  ops=$(ls .gpubin/_torch_ops.so.xz .carry/_torch_ops.so.xz 2>/dev/null | head -1)
  if [ -n "$ops" ]; then xz -dc "$ops" >"$site/echo_allreduce/_torch_ops.so" || rc=1; fi
  export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
  python3 -c "from echo_allreduce import ops; print('torch ops:', ops.ops_available(), ops._error or '')" 2>&1 | tee -a "$summary"
  say "pyprebuilt: $((SECONDS - start)) s"
  py_diagnose
  bundle
}
stage_python() {
  start=$SECONDS
  # The unknown-handle error path crashed once on a GPU machine (docs/python.md): a probe first,
  # under gdb where there is one, so a crash leaves a native backtrace.
  probe="import torch; from echo_allreduce import ops; ops._load()
try: torch.ops.echo.state_bytes(12345, 16)
except ValueError as e: print('probe: ValueError', str(e)[:80])"
  if command -v gdb >/dev/null; then
    timeout 120 gdb -q -batch -ex run -ex bt --args "$(python3 -c 'import sys; print(sys.executable)')" -c "$probe" \
      >"$logs/probe.log" 2>&1
  else
    timeout 120 python3 -X faulthandler -c "$probe" >"$logs/probe.log" 2>&1
  fi
  say "python probe: exit $? $(grep -E '^probe:|SIGSEGV|Segmentation' "$logs/probe.log" | head -2)"
  # One pytest per file: a crash in one leaves the others' results.
  for t in "$root"/python/tests/test_*.py; do
    late "pytest $(basename "$t")" && continue
    # under the native stack printer where the crash probe built one (no gdb on the GPU image)
    (cd /tmp && LD_PRELOAD=$([ -f /tmp/echo-segv.so ] && echo /tmp/echo-segv.so) timeout "$(left)" python3 -X faulthandler -m pytest -rs -q -p no:cacheprovider "$t") \
      >"$logs/pytest-$(basename "$t" .py).log" 2>&1 || rc=1
    say "pytest $(basename "$t"): $(tail -1 "$logs/pytest-$(basename "$t" .py).log")"
    bundle
  done
  grep -h -E "^(SKIPPED|FAILED|ERROR)" "$logs"/pytest-*.log | tee -a "$summary"
  say "python tests: $((SECONDS - start)) s"
}
run_example() {  # name, script and its arguments
  local ex=$1; shift
  late "$ex" && return
  local start=$SECONDS
  local cap="ECHO_${ex^^}_CAP"  # e.g. ECHO_TRAIN_CAP=300: at most 300 s for this stage
  timeout "$(left "${!cap:-100000}")" python3 "$@" >"$logs/$ex.log" 2>&1 || rc=1
  tail -30 "$logs/$ex.log" | tee -a "$summary"
  say "$ex: $((SECONDS - start)) s"
  bundle
}
stage_train() { run_example train examples/python/train_tp.py ${ECHO_TRAIN_ARGS:-} --out "$out/training.json"; }
stage_e2e() { run_example e2e examples/python/e2e_tp.py ${ECHO_E2E_ARGS:-} --out "$out/e2e.json"; }
stage_beside() { run_example beside examples/python/beside_gemm.py ${ECHO_BESIDE_ARGS:-} --out "$out/beside-gemm.json"; }
stage_smollm() { run_example smollm examples/python/smollm_tp.py eval ${ECHO_SMOLLM_ARGS:-} --out "$out/smollm.json"; }
stage_bench() {
  timeout "$(left)" "$build/benchmark/echo_bench" --benchmark_out="$out/bench.json" --benchmark_out_format=json ${ECHO_BENCH_ARGS:-} \
    >"$logs/bench.log" 2>&1 || rc=1
  tail -40 "$logs/bench.log" | tee -a "$summary"
}
stage_socket() {
  NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=lo ECHO_BENCH_LABEL=nccl-socket \
    ECHO_BENCH_SIZES=${ECHO_SOCKET_SIZES:-64K,1M,16M,64M,256M} \
    "$build/benchmark/echo_bench" --benchmark_filter='^nccl/|echo_nccl_' \
    --benchmark_out="$out/bench-socket.json" --benchmark_out_format=json >"$logs/bench-socket.log" 2>&1 || rc=1
  tail -12 "$logs/bench-socket.log" | tee -a "$summary"
}
stage_perf() {
  for comp in none error_feedback; do
    timeout "$(left)" "$build/benchmark/echo_perf" -b 64K -e 1G -f 4 -c $comp ${ECHO_PERF_ARGS:-} >"$logs/perf-$comp.log" 2>&1 || rc=1
    tee -a "$summary" <"$logs/perf-$comp.log"
  done
}
stage_codec() {
  timeout "$(left)" tools/codec-profile.sh "$build" "$logs/codec" >"$logs/codec.log" 2>&1 || rc=1
  cp "$logs/codec/codec-table.md" "$out/" 2>/dev/null
  tail -20 "$logs/codec.log" | tee -a "$summary"
}
known=" prebuilt build test legacy sanitize pybuild pyprebuilt python train e2e smollm beside bench socket perf codec "
for st in $stages; do
  [[ $known == *" $st "* ]] || { say "unknown stage '$st' (known:$known)"; rc=1; continue; }
  "stage_$st"
done
bundle
exit $rc
