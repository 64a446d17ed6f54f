"""Shared by the tests under mpirun (tests/dist/): the launcher's command and the start of main."""
import argparse
import os
import shutil
import sys

MPIRUN = shutil.which("mpirun")


def mpirun(np_, *extra):
    """mpirun's command for np_ ranks on this machine (as root, more ranks than cores)."""
    return [MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", str(np_), *extra]


def gemmakit_or_skip():
    """Parses --gemmakit; exits 77 (CTest's skip) when mpirun is not installed."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemmakit", required=True)
    args = ap.parse_args()
    if not MPIRUN:
        print("SKIP: mpirun not found (scripts/install_deps.sh installs openmpi-bin)")
        sys.exit(77)
    return os.path.abspath(args.gemmakit)
