#!/usr/bin/env python3
"""The GPU's benchmark commands through the real binary, on presets' random weights made on the
device: what scripts/device_check.sh runs on the GPU machine at the 31B shape, here at toy size.

    bench_device_test.py --gemmakit build/gemmakit

Skipped (status 77) where `gemmakit devices` lists no CUDA device. make test runs it with the
CUDA emulator's gemmakit_emulated (emulated_bench_device, with GEMMAKIT_DEVICE_LIMITS_QUICK=1:
the ceilings measured on small sizes), so the first GPU run starts from commands that ran.

Checks (no timing thresholds):
  bench model --device cuda --preset P --json (tiny; tiny-e2b eager with the flash prefill;
    tiny-moe): every figure and ceiling positive, each ratio recomputed from the JSON, decode
    steps replayed as CUDA graphs (none with --enforce-eager, none for MoE, which routes on
    the host, and the table says why); --num-layers changes the layer count.
  bench train --device cuda --preset P --json (tiny with 2 packed rows, tiny-moe in f32):
    tokens/s = rows x seq_len / step, MFU = useful FLOPs / step / GEMM rate, a first loss
    near ln(vocabulary) (random weights), the device's peak at least the model's buffers.
  serve --device cuda --preset tiny with `bench serve`, greedy and sampled on the GPU: every
    request completes with its output length.
  Refusals, one line and exit 1: what the GPU trainer does not run (--full, --targets,
    --compare-remat), a CPU-only weight format (--quantize) or flag (--mmap), an unknown preset.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "serve"))
from serve_harness import ServeProcess  # noqa: E402
from train_common import check, finish, has_cuda_device  # noqa: E402


def close(a, b, rel=1e-9):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-30)


def run_json(gk, args, timeout=900):
    p = subprocess.run([gk] + args + ["--json"], capture_output=True, text=True, timeout=timeout)
    if not check(p.returncode == 0, f"{' '.join(args)}: exit {p.returncode}: {p.stderr.strip()}"):
        return None
    return json.loads(p.stdout)


def bench_model(gk):
    small = ["--repeats", "1", "--prompt-len", "24", "--gen-len", "4"]
    cases = [("tiny", small + ["--batch", "2", "--batch-prompt", "8"], True),
             ("tiny", small + ["--num-layers", "2", "--batch", "0", "--decode-products", "gemv"], True),
             ("tiny-e2b", small + ["--batch", "0", "--enforce-eager", "--prefill-attention", "flash"], False),
             ("tiny-moe", small + ["--batch", "2", "--batch-prompt", "8"], False),
             ("tiny", small + ["--num-layers", "2", "--batch", "2", "--batch-prompt", "8", "--batch-invariant"], True)]
    for preset, extra, graphs in cases:
        r = run_json(gk, ["bench", "model", "--device", "cuda", "--preset", preset] + extra)
        if r is None:
            continue
        for key in ("copy_gbps", "gemm_bf16_tflops", "prefill_tok_s", "decode_tok_s", "bytes_per_token", "weight_gb"):
            check(r[key] > 0, f"{preset}: {key} > 0: {r[key]}")
        check(close(r["decode_ratio"], r["decode_tok_s"] * r["bytes_per_token"] / (r["copy_gbps"] * 1e9), 1e-6),
              f"{preset}: decode ratio = tok/s x bytes/token / copy bandwidth")
        check(r["prefill_ratio"] > 0 and r["prefill_attention"] == ("flash" if "flash" in extra else "products"),
              f"{preset}: prefill ratio and attention route {r['prefill_ratio']} {r['prefill_attention']}")
        if extra[extra.index("--batch") + 1] == "2":
            check(r["batch"] == 2 and r["batch_decode_tok_s"] > 0 and r["burst_output_tok_s"] > 0,
                  f"{preset}: the batched and burst figures: {r.get('batch_error')}")
            check(close(r["batch_ratio"], r["batch_decode_tok_s"] / r["batch_ceiling_tok_s"], 1e-6) and
                  close(r["burst_ratio"], r["burst_output_tok_s"] / r["burst_ceiling_tok_s"], 1e-6) and
                  r["burst_ceiling_tok_s"] < r["batch_ceiling_tok_s"] and
                  0 < r["batch_kv_gb_first_step"] < r["batch_kv_gb_last_step"],
                  f"{preset}: the batched and burst ratios to their ceilings")
        check(r["reference_burst_ceiling_tok_s"] <= r["reference_burst_ceiling_fp8kv_tok_s"] and
              r["reference_burst_ceiling_tok_s"] > 0, f"{preset}: the reference burst's ceilings")
        check((r["graphs_captured"] > 0 and r["graph_replays"] > 0) == graphs,
              f"{preset}: graphs captured {r['graphs_captured']}, replayed {r['graph_replays']} (expected {graphs})")
        check((r["graph_nodes"] > 0) == graphs, f"{preset}: {r['graph_nodes']} operations in a decode step's graph")
        check(r["cuda_graphs"] == ("--enforce-eager" not in extra), f"{preset}: cuda_graphs {r['cuda_graphs']}")
        check(r["batch_invariant"] == ("--batch-invariant" in extra), f"{preset}: batch_invariant {r['batch_invariant']}")
        check(r["decode_products"] == ("gemv" if "gemv" in extra else "cublaslt"),
              f"{preset}: decode products {r['decode_products']}")
    # The table: the MoE preset says why no graph was captured.
    p = subprocess.run([gk, "bench", "model", "--device", "cuda", "--preset", "tiny-moe", "--repeats", "1",
                        "--prompt-len", "8", "--gen-len", "2", "--batch", "0"], capture_output=True, text=True,
                       timeout=600)
    check(p.returncode == 0 and "MoE decode steps route on the host" in p.stdout, f"the MoE table: {p.stdout}{p.stderr}")
    # The batch's prompts (default 128 tokens) longer than --prompt-len: one pass still holds one.
    r = run_json(gk, ["bench", "model", "--device", "cuda", "--preset", "tiny", "--num-layers", "2", "--repeats", "1",
                      "--prompt-len", "8", "--gen-len", "2", "--batch", "2"])
    if r is not None:
        check(r["layers"] == 2, f"--num-layers 2 ran {r['layers']} layers")
        check("batch_error" not in r and r["batch_prompt"] == 128, f"128-token batch prompts: {r.get('batch_error')}")


def bench_train(gk):
    for preset, extra in (("tiny", ["--rows", "2"]), ("tiny-moe", ["--precision", "f32", "--num-layers", "3"])):
        r = run_json(gk, ["bench", "train", "--device", "cuda", "--preset", preset, "--seq-len", "32", "--rank", "4",
                          "--steps", "1"] + extra)
        if r is None:
            continue
        rows = r["rows"]
        check(close(r["tokens_per_s"], rows * r["seq_len"] / r["step_seconds"]), f"{preset}: tokens/s")
        check(close(r["mfu"], r["useful_tflop_per_step"] * 1e12 / r["step_seconds"] / (r["gemm_bf16_tflops"] * 1e12)),
              f"{preset}: MFU recomputed")
        # Random weights: the first steps' loss sits near ln(262,144) = 12.48.
        check(abs(r["loss"] - math.log(262144)) < 1.5, f"{preset}: loss {r['loss']} near ln(vocabulary)")
        check(r["device_peak_gib"] >= r["device_model_gib"] > 0 and r["plan_gib"] > 0,
              f"{preset}: memory: peak {r['device_peak_gib']}, model {r['device_model_gib']}, plan {r['plan_gib']}")
        check(r["precision"] == ("f32" if "f32" in extra else "bf16"), f"{preset}: precision {r['precision']}")


def serve_burst(gk, tokenizer, work):
    # Port 0: the server picks a free one and says which (a port chosen here could be taken by
    # the time the server binds it). A server that does not start or exit cleanly ends the test.
    with ServeProcess(gk, None, ["--device", "cuda", "--preset", "tiny", "--max-model-len", "256", "--max-num-seqs", "4",
                                 "--tokenizer-dir", tokenizer], start_timeout=300) as server:
        for sampled in (False, True):
            name = f"burst-{int(sampled)}.json"
            args = [gk, "bench", "serve", "--base-url", server.base_url, "--tokenizer", tokenizer, "--num-prompts", "4",
                    "--random-input-len", "16", "--random-output-len", "6", "--request-rate", "inf",
                    "--ready-check-timeout-sec", "120", "--save-result", "--result-dir", work, "--result-filename", name]
            args += ["--temperature", "1", "--top-k", "64", "--top-p", "0.95"] if sampled else ["--temperature", "0"]
            p = subprocess.run(args, capture_output=True, text=True, timeout=600)
            if not check(p.returncode == 0, f"bench serve (sampled {sampled}): {p.stdout[-500:]}{p.stderr}"):
                continue
            with open(os.path.join(work, name)) as f:
                r = json.load(f)
            check(r["completed"] == 4 and r["total_output_tokens"] == 24,
                  f"sampled {sampled}: {r['completed']} completed, {r['total_output_tokens']} tokens (4 x 6 expected)")


def refusals(gk):
    for args, want in ((["bench", "train", "--device", "cuda", "--preset", "tiny", "--seq-len", "16", "--full"], "--full"),
                       (["bench", "train", "--device", "cuda", "--preset", "tiny", "--seq-len", "16", "--targets", "q,v"],
                        "--targets"),
                       (["bench", "train", "--device", "cuda", "--preset", "tiny", "--seq-len", "16", "--compare-remat"],
                        "--compare-remat"),
                       (["bench", "model", "--device", "cuda", "--preset", "tiny", "--quantize", "q8_0"], "--quantize"),
                       (["bench", "model", "--device", "cuda", "--preset", "tiny", "--mmap"], "--mmap runs on the CPU only"),
                       (["bench", "model", "--device", "cuda", "--preset", "tiny", "--batch-invariant", "--decode-products",
                         "gemv"], "--batch-invariant"),
                       (["bench", "model", "--device", "cuda", "--preset", "nope"], "unknown preset")):
        p = subprocess.run([gk] + args, capture_output=True, text=True, timeout=120)
        lines = p.stderr.strip().splitlines()
        check(p.returncode == 1 and len(lines) == 1 and want in lines[0],
              f"{' '.join(args)}: exit {p.returncode}, stderr {p.stderr!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemmakit", required=True)
    gk = os.path.abspath(ap.parse_args().gemmakit)
    if not has_cuda_device(gk):
        print("SKIP: no CUDA device (gemmakit devices)")
        sys.exit(77)
    tokenizer = os.environ.get("GEMMAKIT_TOKENIZER_DIR") or os.path.join(os.path.dirname(gk), "tokenizer", "gemma3")
    t0 = time.time()
    refusals(gk)
    bench_model(gk)
    bench_train(gk)
    with tempfile.TemporaryDirectory() as work:
        serve_burst(gk, tokenizer, work)
    finish("bench_device", t0)


if __name__ == "__main__":
    main()
