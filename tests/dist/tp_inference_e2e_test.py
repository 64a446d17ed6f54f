#!/usr/bin/python3
"""`mpirun -np N gemmakit logprobs|generate|bench model --tp N`: tensor-parallel inference equals
one process.

    tp_inference_e2e_test.py --gemmakit build/gemmakit

Random f32 models of the tiny presets (Gemma 4: 4 query heads; sliding layers 2 KV heads, full
layers 1 KV head with K=V; tiny-e2b: per-layer inputs, KV sharing, double-wide MLP; tiny-moe:
8 experts, top 2):
  (a) `logprobs --dump-logits` over 12 tokens (ids near both ends of the vocabulary, so every
      vocabulary shard embeds some) at tp 2 (the full layers' single KV head replicated on both
      ranks) and tp 4 (every KV head replicated, one query head per rank): every logit within
      1e-5 of the largest |logit| of one process's, the argmax rows equal. A rank that skipped
      one all-reduce is off by O(1).
  (b) `generate` (greedy, 16 tokens) on tiny-moe at tp 2: the same text as one process.
  (c) `bench model --tp 2 --json`: the group's figures, the bytes communicated per decoded
      token, and rank 0 alone with the whole model (the scaling figure) are reported.
  (d) refused with a clear message and a non-zero exit: --tp 2 without mpirun, mpirun -np 2
      without --tp, --tp 3 (does not divide 4 query heads).
Skipped (exit 77) without mpirun or numpy. Always --threads 1 per rank.
"""
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "train"))
sys.path.insert(0, HERE)
from dist_common import gemmakit_or_skip, mpirun  # noqa: E402
from train_common import check, env, finish, run  # noqa: E402

TOKENS = "5,6,7,8,9,10,11,12,13,300,131100,262000"


def run_cmd(cmd, timeout=300):
    return subprocess.run(cmd, capture_output=True, text=True, env=env(), timeout=timeout)


def logits(gk, model, out, tp):
    prefix = mpirun(tp) if tp > 1 else []
    extra = ["--tp", str(tp)] if tp > 1 else []
    r = run_cmd(prefix + [gk, "logprobs", "--model", model, "--tokens", TOKENS, "--dump-logits", out,
                          "--threads", "1", "--json"] + extra)
    if r.returncode != 0:
        check(False, f"logprobs tp {tp} exited {r.returncode}: {r.stderr[-2000:]}")
        return None, None
    return json.loads(r.stdout.strip().splitlines()[-1]), out


def main():
    gk = gemmakit_or_skip()
    try:
        import numpy as np
    except ImportError:
        print("SKIP: no numpy (apt-get install python3-numpy)")
        sys.exit(77)
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="gk-tp-") as work:
        models = {}
        for preset in ["tiny", "tiny-e2b", "tiny-moe"]:
            models[preset] = os.path.join(work, preset)
            run(gk, ["init", "--preset", preset, "--seed", "3", "--dtype", "f32", "--out", models[preset]])

        # (a) logits
        for preset, tp in [("tiny", 2), ("tiny", 4), ("tiny-e2b", 2), ("tiny-moe", 2), ("tiny-moe", 4)]:
            one, one_path = logits(gk, models[preset], os.path.join(work, f"{preset}-1.npy"), 1)
            par, par_path = logits(gk, models[preset], os.path.join(work, f"{preset}-{tp}.npy"), tp)
            if one is None or par is None:
                continue
            a, b = np.load(one_path), np.load(par_path)
            check(a.shape == b.shape, f"{preset} tp {tp}: logits shape {b.shape} vs {a.shape}")
            if a.shape != b.shape:
                continue
            scale = float(np.abs(a).max())
            err = float(np.abs(a - b).max())
            ok = check(err <= 1e-5 * scale, f"{preset} tp {tp}: max |logit difference| {err:.3g} > 1e-5 x {scale:.3g}")
            ok = check(one["argmax"] == par["argmax"], f"{preset} tp {tp}: argmax {par['argmax']} vs {one['argmax']}") and ok
            if ok:
                print(f"ok: {preset} tp {tp}: logits within {err / scale:.2e} of the largest, argmax equal", flush=True)

        # (b) greedy generation
        gen = [gk, "generate", "--model", models["tiny-moe"], "--prompt", "module top(input clk",
               "--max-tokens", "16", "--threads", "1"]
        one = run_cmd(gen)
        par = run_cmd(mpirun(2) + gen + ["--tp", "2"])
        check(one.returncode == 0 and par.returncode == 0, f"generate: {one.stderr[-500:]} {par.stderr[-1500:]}")
        if check(one.stdout == par.stdout and one.stdout.strip(),
                 f"generate tp 2: {par.stdout!r} vs one process {one.stdout!r}"):
            print("ok: tiny-moe generate tp 2: the same greedy text", flush=True)

        # (c) bench model
        r = run_cmd(mpirun(2) + [gk, "bench", "model", "--model", models["tiny"], "--tp", "2", "--threads", "1",
                                 "--prompt-len", "32", "--gen-len", "8", "--repeats", "1", "--batch", "2", "--json"])
        check(r.returncode == 0, f"bench model tp 2 exited {r.returncode}: {r.stderr[-2000:]}")
        if r.returncode == 0:
            lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
            check(len(lines) == 1, f"bench model tp 2: rank 0 alone prints, got {len(lines)} JSON lines")
            b = json.loads(lines[0])
            check(b["tp"] == 2 and b["decode_tok_s"] > 0 and b["alone_decode_tok_s"] > 0 and
                  b["alone_prefill_tok_s"] > 0, f"bench model tp 2: {b}")
            # One decoded token: an all-reduce of D floats per o/down (and the embedding), the
            # vocabulary-parallel logits' half row.
            check(b["comm_bytes_per_decode_token"] >= 4 * 262144 / 2, f"bytes per token {b['comm_bytes_per_decode_token']}")
            print(f"ok: bench model tp 2: decode {b['decode_tok_s']:.1f} tok/s vs {b['alone_decode_tok_s']:.1f} "
                  f"alone, {b['comm_bytes_per_decode_token'] / 1024:.0f} KiB per token", flush=True)

        # (d) refusals
        lp = [gk, "logprobs", "--model", models["tiny"], "--tokens", "5,6", "--threads", "1", "--json"]
        for label, cmd, want in [
                ("--tp 2 without mpirun", lp + ["--tp", "2"], "needs exactly 2 ranks"),
                ("mpirun -np 2 without --tp", mpirun(2) + lp, "give --tp N"),
                ("--tp 3", mpirun(3) + lp + ["--tp", "3"], "does not divide the model's 4 query heads")]:
            r = run_cmd(cmd, timeout=120)
            if check(r.returncode != 0 and want in r.stderr, f"{label}: exit {r.returncode}, stderr {r.stderr[-800:]!r}"):
                print(f"ok: {label}: refused ({want!r})", flush=True)
    finish("tp_inference_e2e", t0)


if __name__ == "__main__":
    main()
