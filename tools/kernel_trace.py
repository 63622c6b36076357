#!/usr/bin/env python3
"""Summarizes a kernel trace (tools/kernel_trace.c) of forge decode steps.

Usage: python3 tools/kernel_trace.py TRACE [--steps N] [--list]

A decode step is the run of kernels from one embedding launch to the next. The summary takes the
last N whole steps (default 5) and gives, per kernel and launch shape, its count a step, its mean
duration, and its mean end-to-end time: from the end of the kernel before it to its own end, the time
it adds to the step when kernels overlap (programmatic dependent launch places a kernel before the
one before it ends, so durations overlap and do not add up). --list prints the last whole step kernel
by kernel instead.
"""
import argparse
import collections
import shutil
import subprocess
import sys


def demangle(names):
    """Readable kernel names: c++filt where there is one, else the mangled names."""
    if not shutil.which("c++filt"):
        return {n: n for n in names}
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.split("\n")
    short = {}
    for n, d in zip(names, out):
        short[n] = d.split("(")[0].replace("void ", "").replace("forge__", "") or n
    return short


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    rows = []
    with open(args.trace) as f:
        for line in f:
            parts = line.split(None, 4)
            if len(parts) == 5:
                rows.append((int(parts[0]), int(parts[1]), int(parts[2]), int(parts[3]), parts[4].strip()))
    rows.sort()
    starts = [i for i, r in enumerate(rows) if "embed" in r[4]]
    steps = list(zip(starts, starts[1:]))[-args.steps:]
    if not steps:
        sys.exit("kernel_trace: no whole decode step in %s (a step runs from one embedding launch to the next)" % args.trace)
    name = demangle(sorted({r[4] for r in rows}))
    if args.list:
        first, last = steps[-1]
        prev = rows[first][0]
        for i, (start, end, grid, block, n) in enumerate(rows[first:last]):
            print("%4d %-56s grid %6d block %4d  %8.2f us  end-to-end %8.2f us" % (i, name[n][:56], grid, block, (end - start) / 1e3,
                                                                                (end - prev) / 1e3))
            prev = end
        return
    agg = collections.OrderedDict()
    totals = []
    for first, last in steps:
        prev = rows[first][0]
        totals.append((rows[last - 1][1] - rows[first][0]) / 1e3)
        for start, end, grid, block, n in rows[first:last]:
            a = agg.setdefault((name[n], grid, block), [0, 0.0, 0.0])
            a[0] += 1
            a[1] += (end - start) / 1e3
            a[2] += (end - prev) / 1e3
            prev = end
    k = len(steps)
    print("steps (us): %s; kernels a step: %d" % (", ".join("%.0f" % t for t in totals), steps[-1][1] - steps[-1][0]))
    print("%-56s %6s %5s %6s %10s %10s %10s" % ("kernel", "grid", "block", "count", "duration", "end-to-end", "a step"))
    for (n, grid, block), (count, dur, e2e) in sorted(agg.items(), key=lambda kv: -kv[1][2]):
        print("%-56s %6d %5d %6.0f %10.2f %10.2f %10.1f" % (n[:56], grid, block, count / k, dur / count, e2e / count, e2e / k))


if __name__ == "__main__":
    main()
