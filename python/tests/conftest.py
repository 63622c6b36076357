"""The tests import forge from this source tree when it has been built in place (`python setup.py
build_ext --inplace`, as tests/run.sh does), else the installed package (`pip install ./python`)."""
import glob
import os
import sys

PACKAGE_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
if glob.glob(os.path.join(PACKAGE_ROOT, "forge", "_native*")):
    sys.path.insert(0, PACKAGE_ROOT)
