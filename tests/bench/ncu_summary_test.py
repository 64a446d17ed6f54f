#!/usr/bin/env python3
"""scripts/ncu_summary.py on CSV in Nsight Compute's details layout (one row per launch and
metric, `==PROF==` lines around it), in both unit styles ncu prints: launches of one function
summed, units scaled, throughputs weighted by time, and a file that is not ncu's refused in one
line. (ncu itself needs a GPU: scripts/device_check.sh's profile steps run it there.)"""
import json
import os
import subprocess
import sys
import tempfile

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "ncu_summary.py")
HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')
RMS = "void gk::cuda::(anonymous namespace)::RmsNormKernel<float, 256>(const float *, float *, int)"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_kernel__5x_cublas"


def rows(launch, kernel, metrics):
    for section, name, unit, value in metrics:
        yield (f'"{launch}","4242","gemmakit","127.0.0.1","{kernel}","1","13","(256, 1, 1)","(132, 1, 1)","0","9.0",'
               f'"{section}","{name}","{unit}","{value}"')


def launch(launch_id, kernel, t, t_unit, dram_pct, sm_pct, read, write, b_unit):
    sol = "GPU Speed Of Light Throughput"
    cmd = "Command line profiler metrics"
    return list(rows(launch_id, kernel, [(sol, "DRAM Frequency", "cycle/nsecond", "2.62"),
                                          (sol, "Duration", t_unit, t), (sol, "DRAM Throughput", "%", dram_pct),
                                          (sol, "Compute (SM) Throughput", "%", sm_pct),
                                          (cmd, "dram__bytes_read.sum", b_unit, read),
                                          (cmd, "dram__bytes_write.sum", b_unit, write)]))


def check(ok, what):
    if not ok:
        print(f"FAIL: {what}")
        sys.exit(1)


def run(path, *extra):
    return subprocess.run([sys.executable, SCRIPT, path, *extra], capture_output=True, text=True, timeout=60)


def main():
    with tempfile.TemporaryDirectory() as d:
        for style, (us, ms, mb, gb) in {"scaled": ("usecond", "msecond", "Mbyte", "Gbyte"),
                                         "abbreviated": ("us", "ms", "MB", "GB")}.items():
            lines = ["==PROF== Connected to process 4242 (/tmp/gemmakit)", HEADER]
            # RmsNorm twice: 10 us at 50 % DRAM and 30 us at 90 %; the product once, 1.5 ms.
            lines += launch(0, RMS, "10", us, "50", "5", "2", "1", mb)
            lines += launch(1, GEMM, "1.5", ms, "20", "80", "1.2", "0.3", gb)
            lines += launch(2, RMS, "30", us, "90", "7", "1,000", "0", mb)  # ncu's thousands separator
            lines.append("==PROF== Disconnected from process 4242")
            path = os.path.join(d, f"{style}.csv")
            with open(path, "w") as f:
                f.write("\n".join(lines) + "\n")
            out = os.path.join(d, f"{style}.json")
            p = run(path, "--json", out)
            check(p.returncode == 0, f"{style}: exit {p.returncode}: {p.stderr}")
            s = json.load(open(out))
            check(s["launches"] == 3, f"{style}: launches {s['launches']}")
            check(abs(s["total_ms"] - 1.54) < 1e-9, f"{style}: total {s['total_ms']} ms")
            gemm, rms = s["kernels"]  # longest first
            check(gemm["kernel"] == GEMM[:77] + "...", f"{style}: long names cut at 80: {gemm['kernel']}")
            check(rms["kernel"] == "RmsNormKernel<float, 256>", f"{style}: short name {rms['kernel']!r}")
            check(rms["launches"] == 2 and abs(rms["ms"] - 0.04) < 1e-12, f"{style}: {rms}")
            check(abs(rms["dram_gb"] - 1.003) < 1e-12, f"{style}: RmsNorm bytes {rms['dram_gb']}")
            check(abs(rms["dram_gb_s"] - 1.003 / 40e-6) < 1e-6, f"{style}: RmsNorm rate {rms['dram_gb_s']}")
            check(abs(rms["dram_pct"] - 80.0) < 1e-9, f"{style}: time-weighted DRAM % {rms['dram_pct']}")
            check(abs(gemm["sm_pct"] - 80.0) < 1e-9 and abs(gemm["dram_gb_s"] - 1000.0) < 1e-6, f"{style}: {gemm}")
            check(abs(gemm["share"] - 1.5 / 1.54) < 1e-12, f"{style}: share {gemm['share']}")
            check("RmsNormKernel<float, 256>" in p.stdout and "3 kernel launches" in p.stdout, p.stdout)
        # Not ncu's CSV, and a profile with no launches: one line, exit 1.
        for name, text, want in (("log.txt", "==PROF== Connected\nsome text\n", "no ncu CSV header"),
                                 ("empty.csv", HEADER + "\n", "no kernel launches"),
                                 ("raw.csv", '"ID","Kernel Name","gpu__time_duration.sum"\n', "no \"Metric Name\" column")):
            path = os.path.join(d, name)
            with open(path, "w") as f:
                f.write(text)
            p = run(path)
            lines = p.stderr.strip().splitlines()
            check(p.returncode == 1 and len(lines) == 1 and want in lines[0], f"{name}: {p.returncode} {p.stderr!r}")
    print("ncu_summary: all checks passed")


if __name__ == "__main__":
    main()
