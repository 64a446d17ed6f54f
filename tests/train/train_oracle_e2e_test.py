#!/usr/bin/python3
"""`gemmakit train` against the PyTorch oracle (tests/oracle/train_ref.py train), step for step.

    train_oracle_e2e_test.py --gemmakit build/gemmakit [--keep DIR]

For each loss mode (assistant, all): a tiny random Gemma 4 model (`gemmakit init --preset tiny`,
bf16, 6 layers with a K=V full-attention layer and sliding layers of window 16, the real
262,144-piece tokenizer), CodeV-R1-style rows from `gemmakit data synth-verilog` (prompts cut
short, see train_common.make_short_rows) tokenized by `gemmakit data prepare`, and one initial
adapter written here with the oracle's helpers (rank 4, alpha 8, all seven projections; A and
B random and nonzero, so that both factors get gradients from the first step).  Both sides
start from that adapter and train 5 optimizer steps with dropout 0, shuffling off, micro-batch
1 x accumulation 2 (step s takes dataset rows 2s, 2s+1 on both sides), warm-up 2 steps to a
peak of 1e-3 (so the first step moves only the moments, and the parameters then move by ~1e-3
per element and step), cosine decay to 0 over the 5 steps, weight decay 0.2 (high, so that it
is ~5 % of the update and a trainer without it fails the update check below), and in the `all`
run global-norm clipping at a threshold between the steps' norms (checked: at least one step
clipped and one not).

Compared per step (RUN/metrics.jsonl vs the oracle's losses.json):
  loss          relative 1e-4   (float32 forward, rows of <= 110 tokens, a 262,144-way softmax)
  grad_norm     relative 1e-3   (the pre-clipping global norm)
  learning_rate absolute 1e-9   (the schedule is exact arithmetic on both sides)
  target_tokens exactly
and the final adapters (RUN/adapter/adapter_model.safetensors vs the oracle's), same keys and
shapes, per tensor:
  max |gk - ref| / max |ref| < 1e-3 (the scale of the tensor, not of each element), and
  |upd_gk - upd_ref| / |upd_ref| < 1e-2 (Frobenius norms; upd = final - init, what training did).
Why these and not tighter: Adam divides every step by sqrt(v), so an element whose gradient is
tiny or changes sign moves by ~lr whatever the gradient's size; float32 gradients that agree to
~1e-5 relative to a tensor's largest entry can still differ in sign on such elements, and then
that element's final value differs by up to ~2 lr per step (here ~5e-3 at most, on a scale of
max|p| ~ 0.3), so an element-wise relative bound would be noise.  Measured (this setup): the
first ratio is at most ~2e-4, the second ~5e-4, losses agree to ~5e-7 and norms to ~4e-5, so
the bounds leave 5-20x headroom, while real errors move the update by more (measured by
replaying the oracle with one thing changed: weight decay left out 5 %, clipping left out 11 %;
a schedule off by one step or a wrong gradient fail the per-step checks first).
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from train_common import (ORACLE_DIR, check, check_steps, fail, finish, make_model, make_short_rows,
                          read_safetensors, run, write_recipe)

sys.path.insert(0, ORACLE_DIR)

STEPS, MICRO, ACCUM, WARMUP, LR, WD = 5, 1, 2, 2, 1e-3, 0.2
RANK, ALPHA = 4, 8.0
TARGETS = r"^(?!.*vision).*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)$"
MAX_SEQ_LEN = 110
# 0: no clipping. In the `all` run the unclipped norms are ~18.2, 22.0, 15.8, 19.6, 16.6: 17.5
# clips steps 1, 2 and 4 and leaves 3 and 5 (checked below, so a change of model or data that
# moves the norms shows up as a failure of the test's premise, not as a silent pass).
CLIP = {"assistant": 0.0, "all": 17.5}


def write_init_adapter(model_dir, out_dir):
    import torch  # noqa: F401  (train_ref needs it)
    from train_ref import LoraGemma, make_adapter_config, random_adapter, write_adapter
    m = LoraGemma(model_dir)
    cfg = make_adapter_config(RANK, ALPHA, TARGETS)
    tensors = random_adapter(m, cfg, seed=21, b_std=0.2)
    write_adapter(out_dir, cfg, {k: v[0] for k, v in tensors.items()})
    return {k: v[0] for k, v in tensors.items()}


def batch_file(ds_dir, work):
    """The data set's rows as one train_ref.py batch file: the shard itself when there is one,
    else the shards concatenated (offsets rebased)."""
    with open(os.path.join(ds_dir, "dataset.json")) as f:
        meta = json.load(f)
    shards = meta["shards"]
    if len(shards) == 1:
        return os.path.join(ds_dir, shards[0]["file"]), meta
    from gemma_ref import write_safetensors
    toks, masks, offs = [], [], [np.zeros(1, np.int64)]
    base = 0
    for s in shards:
        t = read_safetensors(os.path.join(ds_dir, s["file"]))
        toks.append(t["tokens"])
        masks.append(t["loss_mask"])
        offs.append(t["offsets"][1:] + base)
        base += len(t["tokens"])
    path = os.path.join(work, os.path.basename(ds_dir) + "-batch.safetensors")
    write_safetensors(path, {"tokens": (np.concatenate(toks), "I32"), "loss_mask": (np.concatenate(masks), "U8"),
                             "offsets": (np.concatenate(offs), "I64")})
    return path, meta


def one_mode(gk, work, model, rows_jsonl, init_dir, init, loss_mode):
    t0 = time.time()
    ds = os.path.join(work, f"ds-{loss_mode}")
    p = run(gk, ["data", "prepare", "--input", rows_jsonl, "--model", model, "--max-seq-len", MAX_SEQ_LEN,
                 "--loss", loss_mode, "--out", ds])
    batch, meta = batch_file(ds, work)
    need = STEPS * MICRO * ACCUM
    if meta["rows"] < need:
        fail(f"{loss_mode}: data prepare kept {meta['rows']} rows (< {need} for {STEPS} steps); output:\n{p.stdout}{p.stderr}")
    print(f"[{loss_mode}] data set: {meta['rows']} rows kept of {meta['meta']['raw']}, "
          f"{len(meta['shards'])} shard(s), {meta['tokens']} tokens", flush=True)

    out = os.path.join(work, f"run-{loss_mode}")
    recipe = write_recipe(os.path.join(work, f"recipe-{loss_mode}.toml"), {
        "model": model, "out": out, "seed": 3,
        "data.path": ds, "data.max_seq_len": MAX_SEQ_LEN, "data.loss": loss_mode, "data.shuffle": False,
        "lora.rank": RANK, "lora.alpha": ALPHA, "lora.dropout": 0.0, "lora.target_modules": TARGETS,
        "lora.init_adapter": init_dir,
        "optim.learning_rate": LR, "optim.warmup_steps": WARMUP, "optim.end_learning_rate": 0.0,
        "optim.weight_decay": WD, "optim.max_grad_norm": CLIP[loss_mode],
        "batch.micro_batch": MICRO, "batch.grad_accum": ACCUM, "batch.max_steps": STEPS,
        "checkpoint.save_every": 0, "checkpoint.keep_last": 1,
    })
    run(gk, ["train", "--config", recipe, "--threads", "2"], timeout=300)
    t_gk = time.time() - t0

    ref = os.path.join(work, f"oracle-{loss_mode}")
    cmd = ["/usr/bin/python3", os.path.join(ORACLE_DIR, "train_ref.py"), "train", "--model", model, "--adapter",
           init_dir, "--batch", batch, "--micro-batch", str(MICRO), "--grad-accum", str(ACCUM), "--steps", str(STEPS),
           "--lr", repr(LR), "--warmup", str(WARMUP), "--end-lr", "0", "--weight-decay", repr(WD), "--out-dir", ref]
    if CLIP[loss_mode] > 0:
        cmd += ["--max-grad-norm", repr(CLIP[loss_mode])]
    q = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if q.returncode != 0:
        fail(f"train_ref.py failed ({q.returncode}):\n{q.stdout}\n{q.stderr}")
    print(f"[{loss_mode}] gemmakit {t_gk:.1f} s, oracle {time.time() - t0 - t_gk:.1f} s", flush=True)

    want = check_steps(loss_mode, out, ref, STEPS)
    check(want[0]["lr"] == 0.0 and max(w["lr"] for w in want) == LR, f"{loss_mode}: schedule {[w['lr'] for w in want]}")
    if CLIP[loss_mode] > 0:
        clipped = sum(w["grad_norm"] > CLIP[loss_mode] for w in want)
        check(0 < clipped < STEPS, f"{loss_mode}: clipping at {CLIP[loss_mode]} triggered on {clipped} of {STEPS} "
              f"steps (norms {[round(w['grad_norm'], 3) for w in want]}); the test wants some, not all")
        print(f"[{loss_mode}] clipping at {CLIP[loss_mode]}: {clipped} of {STEPS} steps clipped", flush=True)

    a = read_safetensors(os.path.join(out, "adapter", "adapter_model.safetensors"))
    b = read_safetensors(os.path.join(ref, "adapter_model.safetensors"))
    check(set(a) == set(b) == set(init), f"{loss_mode}: adapter keys differ: {sorted(set(a) ^ set(b))[:4]}")
    worst_max, worst_upd, moved = (0.0, ""), (0.0, ""), 0.0
    du_all, u_all = 0.0, 0.0
    for k in sorted(set(a) & set(b)):
        if not check(a[k].shape == b[k].shape, f"{loss_mode}: {k} shape {a[k].shape} vs {b[k].shape}"):
            continue
        x, y, x0 = a[k].astype(np.float64), b[k].astype(np.float64), init[k].astype(np.float64)
        r_max = float(np.abs(x - y).max() / max(np.abs(y).max(), 1e-30))
        upd_ref, upd_gk = y - x0, x - x0
        r_upd = float(np.linalg.norm(upd_gk - upd_ref) / max(np.linalg.norm(upd_ref), 1e-30))
        du_all += float(np.sum((upd_gk - upd_ref) ** 2))
        u_all += float(np.sum(upd_ref ** 2))
        moved = max(moved, float(np.abs(upd_ref).max()))
        worst_max = max(worst_max, (r_max, k))
        worst_upd = max(worst_upd, (r_upd, k))
        check(r_max < 1e-3, f"{loss_mode}: {k}: max|gk - ref| / max|ref| = {r_max:.2e} (tol 1e-3)")
        check(r_upd < 1e-2, f"{loss_mode}: {k}: |upd_gk - upd_ref| / |upd_ref| = {r_upd:.2e} (tol 1e-2)")
    check(moved > 1e-3, f"{loss_mode}: the oracle's parameters moved by at most {moved:.1e}: the test is too weak")
    print(f"[{loss_mode}] final adapter ({len(b)} tensors): worst max|diff|/max|ref| {worst_max[0]:.2e} ({worst_max[1]}), "
          f"worst update rel diff {worst_upd[0]:.2e}, all tensors {math.sqrt(du_all / max(u_all, 1e-30)):.2e}, "
          f"largest update {moved:.2e}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemmakit", required=True)
    ap.add_argument("--keep", help="work in this directory and leave it")
    a = ap.parse_args()
    gk = os.path.abspath(a.gemmakit)
    t0 = time.time()
    try:
        import torch  # noqa: F401
    except ImportError:
        print("SKIP: no torch in /usr/bin/python3 (scripts/install_deps.sh)")
        sys.exit(77)  # ctest's SKIP_RETURN_CODE
    with tempfile.TemporaryDirectory(prefix="gk-train-oracle-") as tmp:
        work = os.path.abspath(a.keep) if a.keep else tmp
        os.makedirs(work, exist_ok=True)
        model = make_model(gk, os.path.join(work, "model"), seed=7)
        rows = os.path.join(work, "rows.jsonl")
        make_short_rows(gk, work, rows, n=40, seed=11)
        init_dir = os.path.join(work, "init-adapter")
        init = write_init_adapter(model, init_dir)
        for mode in ("assistant", "all"):
            one_mode(gk, work, model, rows, init_dir, init, mode)
    finish("train_oracle_e2e", t0)


if __name__ == "__main__":
    main()
