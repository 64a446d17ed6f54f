#!/usr/bin/env python3
"""`gemmakit bench model` through the real binary, on a `gemmakit init --preset tiny` model.

    bench_model_test.py --gemmakit build/gemmakit

Checks (no timing thresholds: the figures depend on the machine and its load): every
ceiling the run measures is positive; each printed ratio is its figure divided by its
ceiling, recomputed here from the JSON; weight bytes per decoded token lie between the
layer weights and the whole file; the table names the sgemm ceiling, and on a CPU with bf16 dot
products (bf16_gflops > 0) the oneDNN bf16 matmul ceiling and its ratio; both matrix-product
routes (GEMMAKIT_BLAS_MIN_TOKENS=0: our kernels only) run; a missing model is one error line.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what)


def close(a, b, rel=1e-9):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemmakit", required=True)
    gk = ap.parse_args().gemmakit
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "tiny")
        subprocess.run([gk, "init", "--preset", "tiny", "--out", model, "--seed", "3"], check=True,
                       capture_output=True, timeout=120)
        args = [gk, "bench", "model", "--model", model, "--prompt-len", "80", "--gen-len", "4", "--repeats", "1",
                "--batch", "3", "--threads", "2"]
        for blas in ("0", None):
            env = dict(os.environ)
            if blas is not None:
                env["GEMMAKIT_BLAS_MIN_TOKENS"] = blas
            p = subprocess.run(args + ["--json"], capture_output=True, text=True, timeout=300, env=env)
            check(p.returncode == 0, f"bench model --json exits 0 (blas min tokens {blas}): {p.stderr}")
            if p.returncode != 0:
                continue
            r = json.loads(p.stdout)
            for key in ("read_gbps", "fp32_gflops", "sgemm_gflops", "prefill_tok_s", "decode_tok_s",
                        "batch_decode_tok_s", "bytes_per_token", "flops_per_token"):
                check(r[key] > 0, f"{key} > 0: {r[key]}")
            prefill_gflops = r["prefill_tok_s"] * r["flops_per_token"] / 1e9
            check(close(r["prefill_ratio_fp32"], prefill_gflops / r["fp32_gflops"]), "prefill ratio to FMA peak")
            check(close(r["prefill_ratio_sgemm"], prefill_gflops / r["sgemm_gflops"]), "prefill ratio to sgemm")
            check(r.get("sgemm_library") in ("OpenBLAS", "oneDNN"), f"sgemm library named: {r.get('sgemm_library')}")
            if r["bf16_gflops"] > 0:  # AVX-512 BF16: oneDNN's bf16 matmul is the measured matmul rate
                check(r["onednn_bf16_gflops"] > 0, f"oneDNN bf16 matmul rate > 0: {r['onednn_bf16_gflops']}")
                if r["onednn_bf16_gflops"] > 0:
                    check(close(r["prefill_ratio_onednn"], prefill_gflops / r["onednn_bf16_gflops"]),
                          "prefill ratio to oneDNN bf16 matmul")
            else:
                check(r["onednn_bf16_gflops"] == 0 and r["prefill_ratio_onednn"] == 0,
                      f"no oneDNN ceiling without bf16 dot products: {r['onednn_bf16_gflops']}")
            check(close(r["decode_ratio"], r["decode_tok_s"] * r["bytes_per_token"] / (r["read_gbps"] * 1e9)),
                  "decode ratio to read bandwidth")
            check(close(r["batch_speedup"], r["batch_decode_tok_s"] / r["decode_tok_s"]), "batch speed-up")
            size = os.path.getsize(os.path.join(model, "model.safetensors"))
            check(0.5 * size < r["bytes_per_token"] <= size, f"bytes/token {r['bytes_per_token']} vs file {size}")
        p = subprocess.run(args, capture_output=True, text=True, timeout=300)
        check(p.returncode == 0 and "of sgemm" in p.stdout and re.search(r"(OpenBLAS|oneDNN) sgemm \d", p.stdout),
              f"table names the sgemm ceiling: {p.stdout}")
        has_bf16 = "bf16 dot peak 0 GFLOP/s" not in p.stdout
        check(("oneDNN bf16 matmul" in p.stdout) == has_bf16 and ("of oneDNN bf16 matmul" in p.stdout) == has_bf16,
              f"table names the oneDNN ceiling exactly when the CPU has bf16 dot products: {p.stdout}")
        p = subprocess.run([gk, "bench", "model", "--model", os.path.join(tmp, "missing")], capture_output=True,
                           text=True, timeout=60)
        lines = [l for l in p.stderr.splitlines() if l.strip()]
        check(p.returncode != 0 and len(lines) == 1 and "error" in lines[0], f"missing model: {p.stderr!r}")
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed")
        return 1
    print("bench model: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
