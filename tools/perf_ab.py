#!/usr/bin/env python3
"""Before / after table of echo-perf logs: two or more binaries timed in one run.

    tools/perf_ab.py DIR BUILD_A,BUILD_B[,...]

DIR holds perf-<build>-<config>-<pass>.log (config: lower case, digits and _, e.g. int4_ef), each the
output of one `echo-perf ... -g 2 -S 1 -N 0` run. Prints, per configuration and size, the mean
out-of-place time of each build over its passes (with the spread), the change against the first
build that has it, and whether every pass of every build printed the same error against the exact sum."""
import glob
import os
import re
import statistics
import sys
from collections import defaultdict

builds = sys.argv[2].split(",")
t = defaultdict(list)
e = defaultdict(set)
for f in glob.glob(sys.argv[1] + "/perf-*.log"):
    m = re.match(r"perf-(build[\w-]*?)-([a-z0-9_]+)-\d+\.log", os.path.basename(f))
    if not m:
        continue
    for line in open(f):
        x = line.split()
        if len(x) > 8 and x[0].isdigit() and x[3] == "echo":
            k = (m.group(2), int(x[0]), m.group(1))
            t[k].append(float(x[4]))
            e[k].add(x[8])
for c, s in sorted({(k[0], k[1]) for k in t}):
    have = [b for b in builds if t[(c, s, b)]]  # a configuration may be timed on some builds only
    a = statistics.mean(t[(c, s, have[0])])
    size = f"{s >> 20:5d} MiB" if s >= 1 << 20 else f"{s >> 10:5d} KiB"  # (sizes below 1 MiB were once all "0 MiB")
    row = f"{c:10s} {size}  {have[0]} {a:8.1f} us (sd {statistics.pstdev(t[(c, s, have[0])]):5.1f})"
    for b in have[1:]:
        v = statistics.mean(t[(c, s, b)])
        row += f"  {b} {v:8.1f} us {100 * (v - a) / a:+5.1f} % (sd {statistics.pstdev(t[(c, s, b)]):5.1f})"
    same = len({frozenset(e[(c, s, b)]) for b in have}) == 1
    print(row + f"  rmserr {'same' if same else 'DIFFERS ' + str({b: sorted(e[(c, s, b)]) for b in have})}")
