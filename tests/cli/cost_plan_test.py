#!/usr/bin/env python3
"""`gemmakit cost` and `gemmakit plan` through the real binary.

    cost_plan_test.py --gemmakit build/gemmakit

Checks: cost --paper prints every FACTS.md §3/§6 figure and flags the ones that differ;
cost on real-shaped artifacts (a training_run.json and bench serve result/sweep files written
here) gives the arithmetic recomputed in Python; plan refuses tp=8 for 31B training with the
reason and accepts tp=4; bad input (unknown hardware, impossible meshes, missing or malformed
artifacts, a broken --catalog) gives exactly one "gemmakit: error: ..." line and exit 1.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

FAILURES = []


def run(gk, *args):
    p = subprocess.run([gk, *args], capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what)


def expect_error(gk, args, needle):
    rc, out, err = run(gk, *args)
    lines = err.strip().splitlines()
    check(rc == 1, f"{args}: exit {rc}, want 1")
    check(len(lines) == 1 and lines[0].startswith("gemmakit: error: "), f"{args}: stderr is not one error line: {err!r}")
    check(needle in err, f"{args}: {needle!r} not in {err!r}")


def test_paper(gk):
    rc, out, err = run(gk, "cost", "--paper")
    check(rc == 0, f"cost --paper exit {rc}: {err}")
    for s in ["$56.11", "$119.23", "$6.12", "$6.10", "$12.64", "$12.68", "1.21 s", "1.94 s", "9.17M", "1.61×", "2.12×",
              "5.05M", "5.36M", "4.34M", "2.62M", "$4.26", "$4.27", "$4.12", "$4.13", "$4.96", "$4.95", "$8.44",
              "$77.63", "$141.35", "$228.27", "$296.19", "$572.59", "$650.11", "1.82×", "1.30×", "1.14×",
              "8 differ from the report as printed", "the report's claim is inconsistent: 1.82× is the 1-hour horizon"]:
        check(s in out, f"cost --paper lacks {s!r}")
    rc, out, _ = run(gk, "cost", "--paper", "--json")
    figures = json.loads(out)["paper"]
    check(sum(1 for f in figures if not f["matches"]) == 8, "cost --paper --json: 8 mismatches")


def test_artifacts(gk, tmp):
    run_json = os.path.join(tmp, "training_run.json")
    with open(run_json, "w") as f:
        json.dump({"wall_time_s": 12024.0, "tokens": 9174312, "tokens_per_s": 763.0, "resumed_from": None}, f)
    sweep = os.path.join(tmp, "sweep.json")
    with open(sweep, "w") as f:
        json.dump({"gemmakit_sweep": 1, "points": [
            {"input_len": 512, "output_len": 256, "request_rate": 4.0, "output_throughput": 900.0},
            {"input_len": 512, "output_len": 256, "request_rate": "inf", "output_throughput": 1403.0}]}, f)
    result = os.path.join(tmp, "result.json")
    with open(result, "w") as f:
        json.dump({"request_rate": 4.0, "completed": 30, "total_input_tokens": 30 * 4096, "total_output_tokens": 30 * 512,
                   "output_throughput": 1206.0, "gemmakit": {"input_len": 4096, "output_len": 512}}, f)
    rc, out, err = run(gk, "cost", "--training-run", run_json, "--train-hardware", "tpu-v5p-8", "--bench", sweep,
                       "--bench", result, "--serve-hardware", "tpu-v6e-8", "--serve-hours", "1,8,24", "--json")
    check(rc == 0, f"cost on artifacts: exit {rc} {err}")
    j = json.loads(out)
    hours = 12024.0 / 3600
    check(abs(j["training"]["cost"] - hours * 16.80) < 1e-9, "training cost")
    check(abs(j["training"]["cost_per_m_tokens"] - hours * 16.80 / 9.174312) < 1e-9, "cost per 1M tokens")
    by = {s["workload"]: s for s in j["serving"]}
    check(abs(by["512 in / 256 out"]["output_tok_per_s"] - 1403) < 1e-9, "best point of the sweep")
    check(abs(by["512 in / 256 out"]["cost_per_m_output"] - 21.52 / (1403 * 3600 / 1e6)) < 1e-9, "serving $/1M")
    check(abs(by["4096 in / 512 out"]["cost_per_m_output"] - 21.52 / (1206 * 3600 / 1e6)) < 1e-9, "serving $/1M (4k)")
    check([r["serving_hours"] for r in j["tco"]] == [0, 1, 8, 24], "tco horizons")
    check(abs(j["tco"][3]["cost"] - (hours * 16.80 + 24 * 21.52)) < 1e-9, "tco 24 h")
    rc, out, _ = run(gk, "cost", "--training-run", run_json, "--price", "10")
    check(rc == 0 and "$33.40" in out, f"cost --price: {out}")
    # --catalog overrides the built-in prices.
    cat = os.path.join(tmp, "hw.toml")
    with open(cat, "w") as f:
        f.write('[chips.x]\nmemory_gib = 16\nmemory_bandwidth_gb_s = 100\nbf16_tflops = 10\n'
                '[machines.box]\nchip = "x"\nchips = 1\nprice_per_hour = 3.60\n')
    rc, out, err = run(gk, "cost", "--catalog", cat, "--training-run", run_json, "--hardware", "box")
    check(rc == 0 and "$12.02" in out, f"cost --catalog: {out} {err}")

    bad = os.path.join(tmp, "bad.json")
    with open(bad, "w") as f:
        f.write("{not json")
    expect_error(gk, ["cost", "--training-run", run_json, "--hardware", "tpu-v9"], "unknown hardware 'tpu-v9' (known: ")
    expect_error(gk, ["cost", "--training-run", os.path.join(tmp, "absent.json"), "--hardware", "tpu-v5p-8"], "absent.json: No such file")
    expect_error(gk, ["cost", "--training-run", bad, "--hardware", "tpu-v5p-8"], "not valid JSON")
    expect_error(gk, ["cost", "--bench", bad, "--hardware", "tpu-v5p-8"], "not valid JSON")
    expect_error(gk, ["cost", "--training-run", run_json], "no price")
    expect_error(gk, ["cost", "--training-run", run_json, "--hardware", "h100"], "has no hourly price")
    expect_error(gk, ["cost", "--training-run", run_json, "--hardware", "tpu-v5p-8", "--serve-hours", "1,x"], "--serve-hours")
    expect_error(gk, ["cost"], "give --training-run")
    broken = os.path.join(tmp, "broken.toml")
    with open(broken, "w") as f:
        f.write("[chips.x\n")
    expect_error(gk, ["cost", "--catalog", broken, "--training-run", run_json, "--hardware", "x"], "broken.toml:1")


def test_plan(gk):
    base = ["plan", "--preset", "31b", "--train", "--lora-rank", "64", "--remat", "--seq-len", "3072"]
    rc, out, err = run(gk, *base, "--mesh", "fsdp=1,tp=4", "--hardware", "tpu-v5p-8", "--project")
    check(rc == 0, f"plan tp=4: exit {rc} {err}")
    check("30.70 B parameters" in out and "FITS" in out, f"plan tp=4 output: {out}")
    check("reference case measured 763 tok/s" in out, "plan --project prints the measured tok/s")
    expect_error(gk, [*base, "--mesh", "fsdp=1,tp=8", "--hardware", "tpu-v6e-8"],
                 "tp=8 does not divide num_global_key_value_heads=4")
    expect_error(gk, [*base, "--mesh", "fsdp=1,tp=8", "--hardware", "tpu-v5p-8"], "tpu-v5p-8 has 4 chips")
    rc, out, err = run(gk, "plan", "--preset", "31b", "--serve", "--mesh", "fsdp=1,tp=8", "--hardware", "tpu-v6e-8",
                       "--kv-cache-dtype", "fp8", "--project")
    check(rc == 0 and "replicated on 2 devices" in out and "23.9 ms" in out, f"plan --serve tp=8: {rc} {out} {err}")
    for mesh, needle in [("fsdp=2,tp=4", "has 8 devices but tpu-v5p-8 has 4 chips"), ("fsdp=0,tp=4", "must be >= 1"),
                         ("fsdp=1,tp=2.5", "is not an integer"), ("tp", "is not AXIS=SIZE")]:
        expect_error(gk, [*base, "--mesh", mesh, "--hardware", "tpu-v5p-8"], needle)
    expect_error(gk, [*base, "--mesh", "fsdp=1,tp=4", "--hardware", "tpu-v9"], "unknown hardware 'tpu-v9'")
    expect_error(gk, ["plan", "--preset", "31b", "--mesh", "tp=4", "--hardware", "tpu-v5p-8"], "give --train and/or --serve")
    expect_error(gk, ["plan", "--model", "/nonexistent", "--train", "--mesh", "tp=4", "--hardware", "tpu-v5p-8"], "config.json")
    # The other variants: E2B's per-layer embeddings and KV sharing, 26B-A4B's experts, full fine-tuning.
    rc, out, err = run(gk, "plan", "--preset", "e2b", "--train", "--full", "--remat", "--serve", "--mesh", "fsdp=1,tp=1",
                       "--hardware", "h200", "--project")
    check(rc == 0 and "4.65 B parameters" in out and "table 2.35 B parameters" in out and "master weights (f32)" in out,
          f"plan e2b --full: {rc} {out} {err}")
    rc, out, err = run(gk, "plan", "--preset", "26b-a4b", "--train", "--mesh", "fsdp=4,tp=1", "--hardware", "tpu-v5p-8",
                       "--serve")
    check(rc == 0 and "25.23 B parameters" in out and "3.82 B parameters active per token" in out and
          "moe.gating_einsum" in out, f"plan 26b-a4b: {rc} {out} {err}")
    expect_error(gk, ["plan", "--preset", "26b-a4b", "--train", "--mesh", "fsdp=1,tp=4", "--hardware", "tpu-v5p-8"],
                 "tp=4 does not divide num_global_key_value_heads=2")
    expect_error(gk, [*base, "--full", "--mesh", "fsdp=1,tp=4", "--hardware", "tpu-v5p-8"], "--full trains every weight")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemmakit", required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        test_paper(a.gemmakit)
        test_artifacts(a.gemmakit, tmp)
        test_plan(a.gemmakit)
    if FAILURES:
        print(f"{len(FAILURES)} failures")
        return 1
    print("cost/plan CLI: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
