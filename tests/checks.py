"""What the Python checks share: check(ok, what) prints "ok WHAT" or "FAIL WHAT" and counts it;
summary() prints the "N passed, N failed" line tests/run.sh reads and returns the exit status."""

counts = {"passed": 0, "failed": 0}


def check(ok, what):
    counts["passed" if ok else "failed"] += 1
    print(("ok " if ok else "FAIL ") + what)


def summary():
    print("%d passed, %d failed" % (counts["passed"], counts["failed"]))
    return 1 if counts["failed"] else 0
