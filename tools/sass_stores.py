#!/usr/bin/env python3
"""Global store widths per kernel, from SASS: the stores ptxas -v does not report on.

At a register cap ptxas may split a 16-byte store (STG.E.128) into 4-byte ones (STG.E) instead of
spilling; four times the store instructions then queue in the LSU (a 2.2x slowdown in
docs/benchmarks.md). This prints, per kernel, its STG.E.128 / .64 / 4-byte / 2-byte counts.

    tools/sass_stores.py FILE.cubin|FILE.o [--nvdisasm PATH] [--cuobjdump PATH]

nvdisasm and cuobjdump come with the CUDA toolkit; where the toolkit lacks them (Debian's), the
PyPI wheels nvidia-cuda-nvdisasm and nvidia-cuda-cuobjdump carry them: `pip download --no-deps -d
DIR nvidia-cuda-nvdisasm`, unzip, pass --nvdisasm. An object file (nvcc -c) needs cuobjdump to
extract its cubin; `nvcc -cubin` output needs only nvdisasm. Compare two builds' outputs with diff."""
import argparse
import collections
import re
import subprocess
import sys
import tempfile
import os

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("file")
ap.add_argument("--nvdisasm", default="nvdisasm")
ap.add_argument("--cuobjdump", default="cuobjdump")
a = ap.parse_args()

cubins = [a.file]
tmp = None
if not a.file.endswith(".cubin"):
    tmp = tempfile.mkdtemp()
    subprocess.run([a.cuobjdump, "-xelf", "all", os.path.abspath(a.file)], cwd=tmp, check=True, capture_output=True)
    cubins = [os.path.join(tmp, f) for f in sorted(os.listdir(tmp)) if f.endswith(".cubin")]
kinds = [("STG.E.128", r"STG\.E(\.[A-Z]+)*\.128\b"), ("STG.E.64", r"STG\.E(\.[A-Z]+)*\.64\b"),
         ("STG.E.U16", r"STG\.E\.U16\b"), ("STG.E", r"STG\.E(\.STRONG\.[A-Z]+)? ")]
for cubin in cubins:
    sass = subprocess.run([a.nvdisasm, "-c", cubin], check=True, capture_output=True, text=True).stdout
    counts, name = collections.OrderedDict(), None
    for line in sass.splitlines():
        m = re.match(r"\s*\.section\s+\.text\.(\S+?),", line)
        if m:
            name = m.group(1)
            counts[name] = collections.Counter()
            continue
        if name and "STG" in line:
            for k, rx in kinds:
                if re.search(rx, line):
                    counts[name][k] += 1
                    break
    names = subprocess.run(["c++filt"], input="\n".join(counts), capture_output=True, text=True).stdout.splitlines() or list(counts)
    for (mangled, c), n in zip(counts.items(), names):
        if not sum(c.values()):
            continue
        n = re.sub(r"echo::|collective::|transport::cuda_ipc::|transport::nccl::|tuning::|quant::|comp::", "", n)
        print(" ".join(f"{c[k]:3d} {k:9s}" for k, _ in kinds) + "  " + n[:170])
