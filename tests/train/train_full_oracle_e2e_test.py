#!/usr/bin/python3
"""`gemmakit train` with lora.full_finetune against the PyTorch oracle (train_ref.py full-train).

    train_full_oracle_e2e_test.py --gemmakit build/gemmakit [--keep DIR]

For an f32 and a bf16 tiny Gemma 4 (`gemmakit init --preset tiny`: 6 layers, a K=V full layer,
sliding window 16, the real 262,144-piece tokenizer, so the tied embedding alone is 33.5 M of
the 35 M trained parameters) and CodeV-R1-style rows tokenized by `gemmakit data prepare`:
both sides train every weight (every matrix and norm; layer_scalar frozen) with AdamW,
micro-batch 1 x accumulation 2, warm-up 1 step to 1e-3, cosine to 0, weight decay 0.1: 4 steps
in f32, 2 in bf16. The bf16 run computes with the bf16-rounded masters on both sides
(train_ref.py --bf16-compute). Why fewer: float32 masters that agree to ~1e-7 round to
different bf16 values wherever a master sits at a rounding midpoint, a whole bf16 ulp (4e-3
relative) on those elements, so two correct bf16 runs separate after a few updates (measured
here: step 3's gradient norm differs by 1e-3, step 4's by 7e-3, while the first two agree to
1e-5). The bf16 gradient itself is checked exactly in training_oracle_test.cc.

Compared per step (RUN/metrics.jsonl vs the oracle's losses.json): loss (relative 1e-4),
grad_norm (the global norm over all 79 tensors, relative 1e-3), learning rate, target tokens.
Compared at the end, per tensor, the f32 masters (gemmakit's last checkpoint) against the
oracle's: |upd_gk - upd_ref| / |upd_ref| < 2e-2 (Frobenius norms of what training changed; the
bound of train_oracle_e2e_test.py, whose docstring says why an element-wise bound would be noise
under Adam), and |gk - ref| < 1e-3 max |ref| element by element except at most one element per
million (at least one per tensor). Why the exception: an element whose gradient sits at rounding
noise takes Adam's whole step, lr, in whichever direction the noise points, on either side. On an
AMD Zen 5 host (2026-12-06) one element of the 33.5 M embedding, (24261, 16), moved +2.6e-4 here
and -2.7e-5 in PyTorch, 1.9e-3 of max |ref|, while every other element of every tensor agreed
within 1.2e-4 of max |ref|; earlier hosts had no such element. The f32 run's RUN/model
must hold exactly those masters (f32 base: no rounding), the bf16 run's their bf16 rounding;
both must load in `gemmakit generate` and the trained model's `logprobs` must differ from the
base's.
"""
import json
import os
import subprocess
import sys
import time

import numpy as np

from train_common import (ORACLE_DIR, check, check_steps, fail, finish, make_short_rows, read_safetensors, run,
                          test_args, work_dir, write_recipe)
from train_oracle_e2e_test import batch_file

STEPS = {"f32": 4, "bf16": 2}
MICRO, ACCUM, WARMUP, LR, WD = 1, 2, 1, 1e-3, 0.1
MAX_SEQ_LEN = 110


def bf16_round(x):
    b = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16
    return (b.astype(np.uint32) << 16).view(np.float32)


def one_dtype(gk, work, rows_jsonl, dtype):
    t0 = time.time()
    model = os.path.join(work, f"tiny-{dtype}")
    run(gk, ["init", "--preset", "tiny", "--out", model, "--seed", 4, "--dtype", dtype])
    ds = os.path.join(work, f"ds-{dtype}")
    run(gk, ["data", "prepare", "--input", rows_jsonl, "--model", model, "--max-seq-len", MAX_SEQ_LEN,
             "--loss", "assistant", "--out", ds])
    batch, meta = batch_file(ds, work)
    steps = STEPS[dtype]
    if meta["rows"] < steps * MICRO * ACCUM:
        fail(f"{dtype}: data prepare kept {meta['rows']} rows (< {steps * MICRO * ACCUM})")
    out = os.path.join(work, f"run-{dtype}")
    recipe = write_recipe(os.path.join(work, f"recipe-{dtype}.toml"), {
        "model": model, "out": out, "seed": 3,
        "data.path": ds, "data.max_seq_len": MAX_SEQ_LEN, "data.loss": "assistant", "data.shuffle": False,
        "lora.full_finetune": True,
        "optim.learning_rate": LR, "optim.warmup_steps": WARMUP, "optim.end_learning_rate": 0.0,
        "optim.weight_decay": WD, "optim.max_grad_norm": 0.0,
        "batch.micro_batch": MICRO, "batch.grad_accum": ACCUM, "batch.max_steps": steps,
        "checkpoint.save_every": 0, "checkpoint.keep_last": 1,
    })
    run(gk, ["train", "--config", recipe, "--threads", "2"], timeout=600)
    t_gk = time.time() - t0

    ref = os.path.join(work, f"oracle-{dtype}")
    cmd = ["/usr/bin/python3", os.path.join(ORACLE_DIR, "train_ref.py"), "full-train", "--model", model,
           "--batch", batch, "--micro-batch", str(MICRO), "--grad-accum", str(ACCUM), "--steps", str(steps),
           "--lr", repr(LR), "--warmup", str(WARMUP), "--end-lr", "0", "--weight-decay", repr(WD), "--out-dir", ref]
    if dtype == "bf16":
        cmd.append("--bf16-compute")
    q = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if q.returncode != 0:
        fail(f"train_ref.py full-train failed ({q.returncode}):\n{q.stdout}\n{q.stderr}")
    print(f"[{dtype}] gemmakit {t_gk:.1f} s, oracle {time.time() - t0 - t_gk:.1f} s", flush=True)

    check_steps(dtype, out, ref, steps)

    ckpt = os.path.join(out, f"checkpoint-{steps}")
    masters = read_safetensors(os.path.join(ckpt, "model.safetensors"))
    oracle = read_safetensors(os.path.join(ref, "masters.safetensors"))
    base = {}
    for name in os.listdir(model):
        if name.endswith(".safetensors"):
            base.update(read_safetensors(os.path.join(model, name)))
    check(set(masters) == set(oracle), f"{dtype}: trained tensors differ: {sorted(set(masters) ^ set(oracle))[:4]}")
    check(not any(k.endswith("layer_scalar") for k in masters), f"{dtype}: layer_scalar was trained")
    worst_max, worst_upd, moved = (0.0, ""), (0.0, ""), 0.0
    for k in sorted(set(masters) & set(oracle)):
        x, y, x0 = (masters[k].astype(np.float64), oracle[k].astype(np.float64), base[k].astype(np.float64))
        diff, scale = np.abs(x - y), max(np.abs(y).max(), 1e-30)
        r_max = float(diff.max() / scale)
        r_upd = float(np.linalg.norm((x - x0) - (y - x0)) / max(np.linalg.norm(y - x0), 1e-30))
        moved = max(moved, float(np.abs(y - x0).max()))
        worst_max = max(worst_max, (r_max, k))
        worst_upd = max(worst_upd, (r_upd, k))
        apart, allowed = int((diff >= 1e-3 * scale).sum()), max(1, x.size // 1_000_000)
        check(apart <= allowed, f"{dtype}: {k}: {apart} elements differ by 1e-3 of max|ref| or more (at most "
              f"{allowed} may: Adam's sign on rounding noise), the worst {r_max:.2e}")
        check(r_upd < 2e-2, f"{dtype}: {k}: |upd_gk - upd_ref| / |upd_ref| = {r_upd:.2e}")
    check(moved > 1e-3, f"{dtype}: the oracle's weights moved by at most {moved:.1e}: the test is too weak")
    print(f"[{dtype}] {len(oracle)} tensors: worst max|diff|/max|ref| {worst_max[0]:.2e} ({worst_max[1]}), "
          f"worst update rel diff {worst_upd[0]:.2e} ({worst_upd[1]}), largest update {moved:.2e}", flush=True)

    # RUN/model: the masters in the base's dtype, every other tensor as the base has it.
    trained = {}
    for name in os.listdir(os.path.join(out, "model")):
        if name.endswith(".safetensors"):
            trained.update(read_safetensors(os.path.join(out, "model", name)))
    check(set(trained) == set(base), f"{dtype}: RUN/model holds other tensors than the base")
    for k in trained:
        want_k = masters[k] if k in masters else base[k]
        if k in masters and dtype == "bf16":
            want_k = bf16_round(want_k)
        check(np.array_equal(trained[k], want_k.astype(np.float32)), f"{dtype}: RUN/model {k} is not the trained value")
    for f in ("config.json", "tokenizer.json"):
        check(os.path.exists(os.path.join(out, "model", f)), f"{dtype}: RUN/model lacks {f}")
    run(gk, ["generate", "--model", os.path.join(out, "model"), "--prompt", "module adder(", "--max-tokens", 4])
    lp = [json.loads(run(gk, ["logprobs", "--model", m, "--text", "module top;", "--json"]).stdout)["logprobs"]
          for m in (model, os.path.join(out, "model"))]
    check(lp[0] != lp[1], f"{dtype}: the trained model's logprobs equal the base's")


def main():
    a = test_args()
    gk = a.gemmakit
    t0 = time.time()
    try:
        import torch  # noqa: F401
    except ImportError:
        print("SKIP: no torch in /usr/bin/python3 (scripts/install_deps.sh)")
        sys.exit(77)
    with work_dir(a.keep, "gk-train-full-oracle-") as work:
        rows = os.path.join(work, "rows.jsonl")
        make_short_rows(gk, work, rows, 20, seed=5)
        for dtype in ("f32", "bf16"):
            one_dtype(gk, work, rows, dtype)
    finish("train_full_oracle_e2e", t0)


if __name__ == "__main__":
    main()
