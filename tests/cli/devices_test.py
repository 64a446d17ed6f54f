#!/usr/bin/env python3
"""`gemmakit devices` (text and --json): the CPU line, and the CUDA line or devices, which say
why no GPU is listed (no CUDA build; or built in and no device or driver found).

    devices_test.py --gemmakit build/gemmakit
"""

import argparse
import json
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemmakit", required=True)
    gk = ap.parse_args().gemmakit
    failures = []

    def check(cond, msg):
        if not cond:
            failures.append(msg)
            print("FAIL:", msg)

    text = subprocess.run([gk, "devices"], capture_output=True, text=True, timeout=60)
    check(text.returncode == 0 and text.stderr == "", f"devices: exit {text.returncode}, stderr {text.stderr!r}")
    lines = text.stdout.splitlines()
    check(len(lines) >= 2 and lines[0].startswith("cpu: ") and " threads, kernels: " in lines[0], f"cpu line: {lines}")
    j = json.loads(subprocess.run([gk, "devices", "--json"], capture_output=True, text=True, check=True,
                                  timeout=60).stdout)
    check(j["cpu"]["threads"] > 0 and j["cpu"]["isa"] in ("scalar", "avx2", "avx512"), f"cpu: {j['cpu']}")
    cuda = j["cuda"]
    if not cuda["built_in"]:
        check(lines[1].startswith("cuda: not built in: ") and cuda["devices"] == [], f"no CUDA build: {lines}")
    elif not cuda["devices"]:
        check(cuda["none_reason"] != "" and lines[1].startswith("cuda: built in (runtime 13."), f"no device: {lines}")
    else:
        for d, line in zip(cuda["devices"], lines[1:]):
            check(line.startswith(d["device"] + ": " + d["name"]) and d["total_bytes"] > 0, f"{d} / {line}")
    print("PASS" if not failures else f"{len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
