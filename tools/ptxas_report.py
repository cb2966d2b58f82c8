#!/usr/bin/env python3
"""Summarise `nvcc -Xptxas -v` output: one line a kernel with registers, stack frame and spills.
Usage: nvcc ... -Xptxas -v 2> log; tools/ptxas_report.py log  (exit 1 if any kernel spills)."""
import re, subprocess, sys

text = open(sys.argv[1]).read() if len(sys.argv) > 1 else sys.stdin.read()
rows, cur, spills = [], None, 0
for line in text.splitlines():
    m = re.search(r"Compiling entry function '(\S+)'", line)
    if m:
        cur = m.group(1)
        continue
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
    if m and cur:
        frame, st, ld = map(int, m.groups())
        rows.append([cur, frame, st, ld, None])
        spills += st + ld
        continue
    m = re.search(r"Used (\d+) registers", line)
    if m and rows and rows[-1][4] is None:
        rows[-1][4] = int(m.group(1))
try:
    names = subprocess.run(["c++filt"], input="\n".join(r[0] for r in rows), capture_output=True, text=True).stdout.splitlines()
except OSError:
    names = [r[0] for r in rows]
for r, n in zip(rows, names):
    n = re.sub(r"echo::|collective::|transport::cuda_ipc::|transport::nccl::|tuning::|quant::|comp::|pipeline_policy<256, 3, 4096>", "", n)
    print(f"{r[4] or 0:4d} regs {r[1]:5d} B stack {r[2]:5d}/{r[3]:5d} B spill  {n[:160]}")
print(f"{len(rows)} kernels, {spills} bytes of spill traffic")
sys.exit(1 if spills else 0)
