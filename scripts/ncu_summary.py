#!/usr/bin/env python3
"""Where a GPU run's time goes, kernel by kernel, from Nsight Compute's CSV (`ncu --csv
--log-file F.csv --section SpeedOfLight [--metrics dram__bytes_read.sum,dram__bytes_write.sum]`,
the "details" page: one row per kernel launch and metric).

  python3 scripts/ncu_summary.py F.csv [--top 25] [--json OUT.json]

Prints one line per kernel (launches of the same function summed): launches, time and its
share of the profiled kernels' time, the DRAM bytes moved and their rate, and the
time-weighted DRAM and SM throughput (% of the GPU's peak, ncu's Speed Of Light). A decode step
should be DRAM-bound (its products read each weight once) and a prefill or training step
SM-bound; a kernel far below both is where the time is lost. scripts/device_check.sh runs it
on the GPU machine (the profile_* steps). Standard library only: the GPU machine's python3.
"""
import argparse
import csv
import json
import re
import sys

# ncu prints units scaled ("usecond", "Mbyte") or, in newer versions, abbreviated ("us", "MB").
TIME = {"nsecond": 1e-9, "ns": 1e-9, "usecond": 1e-6, "us": 1e-6, "msecond": 1e-3, "ms": 1e-3,
        "second": 1.0, "s": 1.0}
BYTES = {"byte": 1, "B": 1, "Kbyte": 1e3, "KB": 1e3, "Mbyte": 1e6, "MB": 1e6, "Gbyte": 1e9, "GB": 1e9,
         "Tbyte": 1e12, "TB": 1e12, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}


def number(text):
    return float(text.replace(",", "").strip())


def short_name(kernel):
    """`void gk::cuda::(anonymous namespace)::Foo<float, 256>(const float *, int)` -> `Foo<float, 256>`."""
    name = kernel.strip().replace("(anonymous namespace)::", "")
    if name.startswith("void "):
        name = name[5:]
    depth = 0  # the parameter list starts at the first '(' outside template brackets
    for i, ch in enumerate(name):
        depth += {"<": 1, ">": -1}.get(ch, 0)
        if ch == "(" and depth == 0:
            name = name[:i]
            break
    base = name.split("<", 1)[0]
    name = base.rsplit("::", 1)[-1] + name[len(base):]  # no namespaces
    return name if len(name) <= 80 else name[:77] + "..."


def read_launches(path):
    """{launch id: {"kernel": name, metric name: value in s, bytes or %}} from the details CSV."""
    with open(path, newline="", errors="replace") as f:
        lines = [line for line in f if not line.startswith("==")]  # ncu's ==PROF== / ==WARNING== lines
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ValueError(f"{path}: no ncu CSV header (a line starting with \"ID\")")
    reader = csv.DictReader(lines[start:])
    for column in ("ID", "Kernel Name", "Metric Name", "Metric Unit", "Metric Value"):
        if column not in (reader.fieldnames or []):
            raise ValueError(f"{path}: no \"{column}\" column; is it ncu's details page (--csv without --page raw)?")
    launches = {}
    for row in reader:
        try:
            value = number(row["Metric Value"])
        except ValueError:
            continue  # n/a, or a text-valued metric
        unit = row["Metric Unit"].strip()
        value *= TIME.get(unit, BYTES.get(unit, 1.0))
        launch = launches.setdefault(row["ID"], {"kernel": row["Kernel Name"]})
        launch[row["Metric Name"].strip()] = value
    return launches


def summarize(launches):
    groups = {}
    for launch in launches.values():
        t = launch.get("Duration", launch.get("gpu__time_duration.sum", 0.0))
        g = groups.setdefault(short_name(launch["kernel"]),
                              {"launches": 0, "seconds": 0.0, "dram_bytes": 0.0, "dram_pct_s": 0.0, "sm_pct_s": 0.0,
                               "has_bytes": False})
        g["launches"] += 1
        g["seconds"] += t
        if "dram__bytes_read.sum" in launch or "dram__bytes_write.sum" in launch:
            g["has_bytes"] = True
            g["dram_bytes"] += launch.get("dram__bytes_read.sum", 0.0) + launch.get("dram__bytes_write.sum", 0.0)
        g["dram_pct_s"] += t * launch.get("DRAM Throughput", launch.get("Memory Throughput", 0.0))
        g["sm_pct_s"] += t * launch.get("Compute (SM) Throughput", 0.0)
    total = sum(g["seconds"] for g in groups.values())
    out = []
    for name, g in sorted(groups.items(), key=lambda kv: -kv[1]["seconds"]):
        s = g["seconds"]
        out.append({"kernel": name, "launches": g["launches"], "ms": s * 1e3, "share": s / total if total else 0.0,
                    "dram_gb": g["dram_bytes"] / 1e9 if g["has_bytes"] else None,
                    "dram_gb_s": g["dram_bytes"] / s / 1e9 if g["has_bytes"] and s > 0 else None,
                    "dram_pct": g["dram_pct_s"] / s if s > 0 else 0.0, "sm_pct": g["sm_pct_s"] / s if s > 0 else 0.0})
    return {"kernels": out, "total_ms": total * 1e3, "launches": len(launches)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=25, help="kernels printed (the rest summed in one line)")
    ap.add_argument("--json", help="also write the whole summary here")
    a = ap.parse_args()
    try:
        s = summarize(read_launches(a.csv))
    except (OSError, ValueError) as e:
        print(f"ncu_summary: {e}", file=sys.stderr)
        return 1
    if not s["kernels"]:
        print(f"ncu_summary: {a.csv}: no kernel launches profiled", file=sys.stderr)
        return 1
    print(f"{s['launches']} kernel launches, {s['total_ms']:.3f} ms of kernel time (ncu serializes launches: "
          "gaps between kernels are not in it)")
    print(f"{'kernel':<80} {'launches':>8} {'ms':>10} {'share':>6} {'DRAM GB':>8} {'GB/s':>7} {'DRAM%':>6} {'SM%':>6}")
    rows = s["kernels"][:a.top]
    for k in rows:
        gb = f"{k['dram_gb']:8.3f}" if k["dram_gb"] is not None else f"{'-':>8}"
        rate = f"{k['dram_gb_s']:7.0f}" if k["dram_gb_s"] is not None else f"{'-':>7}"
        print(f"{k['kernel']:<80} {k['launches']:>8} {k['ms']:>10.3f} {k['share']:>6.1%} {gb} {rate} "
              f"{k['dram_pct']:>6.1f} {k['sm_pct']:>6.1f}")
    rest = s["kernels"][a.top:]
    if rest:
        print(f"{f'({len(rest)} more kernels)':<80} {sum(k['launches'] for k in rest):>8} "
              f"{sum(k['ms'] for k in rest):>10.3f} {sum(k['share'] for k in rest):>6.1%}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(s, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
