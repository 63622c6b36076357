#!/bin/sh
# The Python package (python/): forge.h built in place into python/forge/_native*.so, then its pytest
# suite against the CLI (BUILD/forge) and the fixtures. Ends with "N passed, N failed" like the others.
cd "$(dirname "$0")/.." || exit 1
PY=${PYTHON:-python3}
B=${BUILD:-build}
if ! $PY -c "import numpy, pytest, setuptools" 2>/dev/null; then
  $PY -m pip install --quiet numpy pytest setuptools 2>/dev/null || $PY -m pip install --quiet --break-system-packages numpy pytest setuptools
fi
if ! (cd python && $PY setup.py -q build_ext --inplace >/dev/null 2>&1); then
  (cd python && $PY setup.py build_ext --inplace) 2>&1 | tail -n 20
  echo "0 passed, 1 failed"
  exit 1
fi
log=$B/pytest.log
FORGE_CLI=$B/forge $PY -m pytest -q -p no:cacheprovider python/tests >"$log" 2>&1
status=$?
cat "$log"
last=$(tail -n 1 "$log")
passed=$(echo "$last" | sed -n 's/.*[^0-9]\([0-9][0-9]*\) passed.*/\1/p; s/^\([0-9][0-9]*\) passed.*/\1/p' | head -n 1)
failed=$(echo "$last" | sed -n 's/^\([0-9][0-9]*\) failed.*/\1/p; s/.*[^0-9]\([0-9][0-9]*\) failed.*/\1/p' | head -n 1)
errors=$(echo "$last" | sed -n 's/.*[^0-9]\([0-9][0-9]*\) errors\{0,1\}.*/\1/p; s/^\([0-9][0-9]*\) errors\{0,1\}.*/\1/p' | head -n 1)
passed=${passed:-0}
failed=$((${failed:-0} + ${errors:-0}))
[ "$status" -ne 0 ] && [ "$failed" -eq 0 ] && failed=1
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
