#!/usr/bin/env python3
"""Multi-LoRA serving throughput against the base model alone, on one server (a benchmark, not
a test; Debian's python3 with numpy).

Makes --adapters random PEFT adapters of --rank on every projection of --model
(bench/make_random_adapter.py), starts `gemmakit serve` with all of them (--max-loras N), and
alternates two `gemmakit bench serve` runs --alternations times: every request to the base
model, then every request to a random adapter (`--lora-modules a0 a1 ...`). Prints each run's
output throughput, the medians and their ratio.

    bench/serve_lora.py --gemmakit build/gemmakit --model /tmp/g270 --tokenizer build/tokenizer/gemma3
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "serve"))
from serve_harness import ServeProcess  # noqa: E402


def bench(gk, url, tokenizer, args, modules, out_dir, name):
    cmd = [gk, "bench", "serve", "--base-url", url, "--tokenizer", tokenizer, "--random-input-len",
           str(args.input_len), "--random-output-len", str(args.output_len), "--num-prompts", str(args.num_prompts),
           "--max-concurrency", str(args.concurrency), "--temperature", "0", "--seed", "1", "--num-warmups", "2",
           "--save-result", "--result-dir", out_dir, "--result-filename", name]
    if modules:
        cmd += ["--lora-modules", *modules]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(out_dir, name)) as f:
        r = json.load(f)
    if r.get("failed", 0):
        sys.exit(f"{name}: {r['failed']} requests failed")
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemmakit", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--adapters", type=int, default=4)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--num-prompts", type=int, default=64)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--alternations", type=int, default=3)
    ap.add_argument("--server-arg", action="append", default=[], help="extra `gemmakit serve` argument")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gk-serve-lora-bench-") as w:
        names = []
        lora_args = ["--lora"]
        for k in range(args.adapters):
            d = os.path.join(w, f"a{k}")
            subprocess.run([sys.executable, os.path.join(HERE, "make_random_adapter.py"), args.model, d,
                            str(args.rank), str(k)], check=True, stdout=subprocess.DEVNULL)
            names.append(f"a{k}")
            lora_args.append(f"a{k}={d}")
        # (serve_harness runs the server with --threads 2)
        server_args = ["--max-num-seqs", str(args.concurrency),
                       "--max-loras", str(args.adapters), "--max-lora-rank", str(args.rank), *lora_args,
                       *args.server_arg]
        base_runs, lora_runs = [], []
        with ServeProcess(args.gemmakit, args.model, server_args, start_timeout=600) as s:
            for i in range(args.alternations):
                for runs, modules, label in ((base_runs, None, "base"), (lora_runs, names, "lora")):
                    r = bench(args.gemmakit, s.base_url, args.tokenizer, args, modules, w, f"{label}{i}.json")
                    runs.append(r["output_throughput"])
                    print(f"{label:4s} run {i}: {r['output_throughput']:8.1f} output tok/s, "
                          f"median TPOT {r['median_tpot_ms']:.1f} ms", flush=True)
        base, lora = statistics.median(base_runs), statistics.median(lora_runs)
        print(f"median output throughput: base {base:.1f}, {args.adapters} adapters of rank {args.rank} mixed "
              f"{lora:.1f} tok/s: ratio {lora / base:.3f}")


if __name__ == "__main__":
    main()
