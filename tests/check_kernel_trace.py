#!/usr/bin/env python3
"""Checks tools/kernel_trace.py on traces written here, whose sums are known: three decode steps of an
embedding launch (5 us), a kernel placed 1 us before the embedding ends (7 us long, adding 6 us),
and a 2 us kernel, the steps 20 us apart; a trace without a whole step must be refused.
Ends with "N passed, N failed"."""
import os
import re
import subprocess
import sys
import tempfile

from checks import check, summary

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.path.join(HERE, "..", "tools", "kernel_trace.py")


def run(path, *extra):
    return subprocess.run([sys.executable, TOOL, path] + list(extra), capture_output=True, text=True)


def main():
    lines = []
    for step in range(4):  # the fourth embedding closes the third step
        t = step * 20000
        lines.append("%d %d 1 128 forge__k_embed" % (t, t + 5000))
        if step < 3:
            lines.append("%d %d 448 256 forge__k_gate" % (t + 4000, t + 11000))
            lines.append("%d %d 32 128 forge__k_attention" % (t + 11000, t + 13000))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.txt")
        with open(path, "w") as f:
            f.write("\n".join(reversed(lines)) + "\n")  # the order in the file must not matter
        out = run(path)
        check(out.returncode == 0, "summary runs: %s" % out.stderr.strip())
        text = out.stdout
        check("steps (us): 13, 13, 13; kernels a step: 3" in text, "three steps of 13 us and 3 kernels: %r" % text.split("\n")[0])
        rows = {}
        for line in text.split("\n")[2:]:
            m = re.match(r"(\S+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", line.strip())
            if m:
                rows[m.group(1)] = tuple(float(x) for x in m.groups()[1:])
        check(rows.get("k_gate") == (448, 256, 1, 7.0, 6.0, 6.0), "the early-placed kernel: 7 us long, adding 6: %r" % (rows.get("k_gate"),))
        check(rows.get("k_embed") == (1, 128, 1, 5.0, 5.0, 5.0), "the embedding: %r" % (rows.get("k_embed"),))
        check(rows.get("k_attention") == (32, 128, 1, 2.0, 2.0, 2.0), "the last kernel: %r" % (rows.get("k_attention"),))
        check(list(rows)[0] == "k_gate", "sorted by the time added to a step")
        listed = run(path, "--list").stdout.strip().split("\n")
        check(len(listed) == 3 and "end-to-end     6.00 us" in listed[1], "--list: the last step kernel by kernel: %r" % listed)
        with open(path, "w") as f:
            f.write("0 1000 1 1 forge__k_other\n")
        out = run(path)
        check(out.returncode != 0 and "no whole decode step" in out.stderr, "a trace without a whole step is refused: %r" % out.stderr)
    return summary()


if __name__ == "__main__":
    sys.exit(main())
