#!/usr/bin/env python3
"""`gemmakit bench train --compare-torch` through the real binary and the real PyTorch anchor.

    bench_train_torch_test.py --gemmakit build/gemmakit

On a `gemmakit init --preset tiny` model, one alternation of a 32-token step: gemmakit's run and
bench/train_torch_eager.py in bf16 and fp32 (Debian's python3-torch, tcmalloc preloaded,
OMP_WAIT_POLICY=PASSIVE). Checks (no timing thresholds): both sides trained the same shape (the
same LoRA parameter count, tokens, rank, thread count), the anchor ran tuned and in the dtype
asked, every figure is positive, the printed ratio is the medians' quotient recomputed here,
gemmakit ran in bf16; without --threads, or with a missing script, one error line and exit 1.
Skipped (77) without torch or libtcmalloc-minimal4.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "bench", "train_torch_eager.py")
TCMALLOC = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"
FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print("FAIL:", what)
    return cond


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemmakit", required=True)
    gk = ap.parse_args().gemmakit
    if subprocess.run(["/usr/bin/python3", "-c", "import torch"], capture_output=True).returncode != 0:
        print("SKIP: /usr/bin/python3 cannot import torch (Debian python3-torch)")
        sys.exit(77)
    if not os.path.exists(TCMALLOC):
        print(f"SKIP: {TCMALLOC} missing (libtcmalloc-minimal4)")
        sys.exit(77)
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "tiny")
        subprocess.run([gk, "init", "--preset", "tiny", "--seed", "5", "--out", model], check=True,
                       capture_output=True)
        base = [gk, "bench", "train", "--model", model, "--seq-len", "32", "--rank", "4", "--steps", "1"]
        p = subprocess.run(base + ["--threads", "1", "--compare-torch", "--alternations", "1", "--torch-script",
                                   SCRIPT, "--json"], capture_output=True, text=True, timeout=600)
        if not check(p.returncode == 0, f"--compare-torch exited {p.returncode}:\n{p.stderr[-2000:]}"):
            sys.exit(1)
        j = json.loads(p.stdout.strip().splitlines()[-1])
        c = j["compare_torch"]
        check(j["precision"] == "bf16", f"gemmakit ran in {j['precision']!r}, want bf16 (the default)")
        check(j["runs"][0]["tokens_per_s"] > 0, "gemmakit tokens/s")
        runs = {r["compute_dtype"]: r for r in c["runs"]}
        check(set(runs) == {"bfloat16", "float32"}, f"anchor dtypes {sorted(runs)}")
        for dtype, r in runs.items():
            check(r["tuning"] == {"tcmalloc": True, "omp_wait_policy": "PASSIVE"}, f"{dtype}: tuning {r['tuning']}")
            check(r["threads"] == j["threads"] == 1, f"{dtype}: threads {r['threads']} / {j['threads']}")
            check(r["seq_len"] == j["seq_len"] == 32 and r["rank"] == j["rank"] == 4, f"{dtype}: shape differs")
            check(r["lora_params"] == j["trainable_params"],
                  f"{dtype}: the anchor trains {r['lora_params']} LoRA parameters, gemmakit {j['trainable_params']}")
            check(r["lora_modules"] == j["lora_modules"], f"{dtype}: {r['lora_modules']} modules, gemmakit {j['lora_modules']}")
            check(r["tokens_per_s"] > 0 and r["timed_steps"] == 1, f"{dtype}: {r['tokens_per_s']} tokens/s")
        for key in ("bf16", "fp32"):
            t = c[key]
            want = c["gemmakit_median"] / t["median"]
            check(abs(t["gemmakit_ratio"] - want) <= 1e-9 * want, f"{key}: ratio {t['gemmakit_ratio']} != {want}")
        # Refusals: one line, exit 1.
        for extra, needle in (([], "--threads"),
                              (["--threads", "1", "--torch-script", os.path.join(tmp, "missing.py")], "missing.py")):
            q = subprocess.run(base + ["--compare-torch"] + extra, capture_output=True, text=True, timeout=120)
            lines = [l for l in q.stderr.splitlines() if l.strip()]
            check(q.returncode == 1 and len(lines) == 1 and needle in lines[0],
                  f"{extra}: exit {q.returncode}, stderr {q.stderr!r}")
    print("bench_train_torch: " + ("all checks passed" if not FAILURES else f"{len(FAILURES)} failure(s)"))
    sys.exit(1 if FAILURES else 0)


if __name__ == "__main__":
    main()
