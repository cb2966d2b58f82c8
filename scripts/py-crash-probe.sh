#!/usr/bin/env bash
# Why do extension modules built on the GPU image crash when their C++ code throws (docs/python.md)?
# Usage: scripts/py-crash-probe.sh LOGDIR PKGDIR. Prints one line a finding; details in LOGDIR.
# 1. a plain g++ library that throws through a destructor, built with plain flags and with the
#    flags nanobind's Release modules use, called through ctypes (with and without torch imported);
# 2. the module's sections (exception tables present?) and its link line from the pip log;
# 3. the crashing call again under an LD_PRELOAD that prints the native stack (no gdb there).
set -u
logs=$1 pkg=$2 here=$(cd "$(dirname "$0")" && pwd) w=$(mktemp -d)
cxx=${CXX:-c++}
$cxx --version | head -1
gcc -O1 -shared -fPIC -o "$w/segv.so" "$here/probe/segv_backtrace.c" -ldl 2>&1 | tail -3
cp "$w/segv.so" /tmp/echo-segv.so  # gpu-check's python stage runs pytest under it
for flags in "-O2" "-O3 -fvisibility=hidden -ffunction-sections -fdata-sections -Wl,--gc-sections -Wl,-s -fno-stack-protector"; do
  $cxx -std=c++17 -shared -fPIC $flags -o "$w/tp.so" "$here/probe/throw_probe.cpp" 2>&1 | tail -3
  for pre in "" "import torch"; do
    for stream in 0 1; do
      r=$(timeout 60 python3 -c "$pre
import ctypes; print(ctypes.CDLL('$w/tp.so').echo_throw_probe(3, $stream))" 2>&1 | tail -1)
      echo "throw probe [$flags] [${pre:-no torch}] [$([ $stream = 1 ] && echo ostringstream || echo string)]: $r (expect -23, ostringstream -25)"
    done
  done
done
for m in "$pkg"/*.so; do
  echo "sections of $(basename "$m"): $(readelf -S -W "$m" | grep -o -E '\.(eh_frame_hdr|eh_frame|gcc_except_table)' | sort -u | tr '\n' ' ')"
done
# the module's compile and link flags, as CMake wrote them for ninja
grep -h -A8 -E "^build [^:]*_reference[^:]*: CXX_(MODULE|SHARED)_LIBRARY_LINKER" python/build/*/build.ninja >"$logs/reference-link-line.txt" 2>/dev/null
grep -h -m1 -A6 -E "^build [^:]*module\.cpp\.o: CXX_COMPILER" python/build/*/build.ninja >>"$logs/reference-link-line.txt" 2>/dev/null
echo "module flags: $(grep -h -E "^ *(LINK_FLAGS|FLAGS) =" "$logs/reference-link-line.txt" | tr -s ' ' | cut -c1-400 | tr '\n' '|')"
# test_reference.py's crashing call (find() throws past an ostringstream), with and without torch
for pre in "" "import torch"; do
  LD_PRELOAD=$w/segv.so timeout 60 python3 -c "$pre
import numpy as np
from echo_allreduce import reference as R
xs = [np.ones(100, np.float32), np.ones(100, np.float32)]
try: R.ChainState(2, 10, 'int3')
except ValueError as e: print('raised:', e)
try: R.all_reduce(xs, quant='zero_aware', bits=3, group_size=128)
except ValueError as e: print('raised:', e)" >"$logs/crash-backtrace.log" 2>&1
  echo "ChainState and all_reduce(bits=3) under the stack printer [${pre:-no torch}]: exit $? $(grep -c 'raised:' "$logs/crash-backtrace.log") raised; $(grep -m1 'echo-probe: signal' "$logs/crash-backtrace.log")"
  grep -q "echo-probe: signal" "$logs/crash-backtrace.log" && { cp "$logs/crash-backtrace.log" "$logs/crash-backtrace-${pre:+torch}.log"; head -30 "$logs/crash-backtrace.log" | grep -E "^  #"; }
done
LD_DEBUG=bindings python3 -c "import numpy as np
from echo_allreduce import reference as R
try: R.all_reduce([np.ones(100, np.float32)] * 2, quant='zero_aware', bits=3, group_size=128)
except ValueError as e: print('raised:', e)" 2>&1 | grep -E "_reference.*(basic_ostringstream|locale|ios_base|_Unwind|cxa)" | sed -E 's/^ *[0-9]+: *//' | sort -u >"$logs/reference-bindings.log"
echo "stream/unwind bindings of _reference: $(wc -l <"$logs/reference-bindings.log") lines in reference-bindings.log"
rm -rf "$w"
