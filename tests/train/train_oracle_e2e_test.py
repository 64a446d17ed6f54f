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
These runs set train.precision = "f32"; a third run (assistant) trains in bf16, the default,
against the oracle's --bf16-products: see bf16_mode for its bounds.
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
import json
import math
import os
import subprocess
import sys
import time

import numpy as np

from train_common import (ORACLE_DIR, check, check_steps, fail, finish, make_model, make_short_rows, read_safetensors,
                          run, test_args, work_dir, write_recipe)

sys.path.insert(0, ORACLE_DIR)

STEPS, MICRO, ACCUM, WARMUP, LR, WD = 5, 1, 2, 2, 1e-3, 0.2
BF16_LOSS_STEPS = 4  # bf16_mode compares these steps' losses (its docstring says why)
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


def prepare(gk, work, model, rows_jsonl, loss_mode):
    ds = os.path.join(work, f"ds-{loss_mode}")
    p = run(gk, ["data", "prepare", "--input", rows_jsonl, "--model", model, "--max-seq-len", MAX_SEQ_LEN,
                 "--loss", loss_mode, "--out", ds])
    batch, meta = batch_file(ds, work)
    need = STEPS * MICRO * ACCUM
    if meta["rows"] < need:
        fail(f"{loss_mode}: data prepare kept {meta['rows']} rows (< {need} for {STEPS} steps); output:\n{p.stdout}{p.stderr}")
    print(f"[{loss_mode}] data set: {meta['rows']} rows kept of {meta['meta']['raw']}, "
          f"{len(meta['shards'])} shard(s), {meta['tokens']} tokens", flush=True)
    return ds, batch


def gemmakit_run(gk, work, model, ds, init_dir, loss_mode, precision, tag, extra_args=None):
    """One `gemmakit train` of the comparison's recipe. extra_args: more train flags; None takes
    them from GEMMAKIT_TRAIN_EXTRA_ARGS (--device cuda, the GPU trainer against the same oracle:
    scripts/device_check.sh on the GPU, emulated_train_oracle_e2e on the CUDA emulator)."""
    out = os.path.join(work, f"run-{tag}")
    recipe = write_recipe(os.path.join(work, f"recipe-{tag}.toml"), {
        "model": model, "out": out, "seed": 3,
        "data.path": ds, "data.max_seq_len": MAX_SEQ_LEN, "data.loss": loss_mode, "data.shuffle": False,
        "lora.rank": RANK, "lora.alpha": ALPHA, "lora.dropout": 0.0, "lora.target_modules": TARGETS,
        "lora.init_adapter": init_dir,
        "optim.learning_rate": LR, "optim.warmup_steps": WARMUP, "optim.end_learning_rate": 0.0,
        "optim.weight_decay": WD, "optim.max_grad_norm": CLIP[loss_mode],
        "batch.micro_batch": MICRO, "batch.grad_accum": ACCUM, "batch.max_steps": STEPS,
        "checkpoint.save_every": 0, "checkpoint.keep_last": 1, "train.precision": precision,
    })
    if extra_args is None:
        extra_args = os.environ.get("GEMMAKIT_TRAIN_EXTRA_ARGS", "").split()
    run(gk, ["train", "--config", recipe, "--threads", "2"] + list(extra_args), timeout=300)
    with open(os.path.join(out, "training_run.json")) as f:
        got = json.load(f)["precision"]
    check(got == precision, f"{tag}: training_run.json says precision {got!r}, the recipe {precision!r}")
    return out


def oracle_run(model, batch, init_dir, loss_mode, ref, extra=()):
    cmd = [sys.executable, os.path.join(ORACLE_DIR, "train_ref.py"), "train", "--model", model, "--adapter",
           init_dir, "--batch", batch, "--micro-batch", str(MICRO), "--grad-accum", str(ACCUM), "--steps", str(STEPS),
           "--lr", repr(LR), "--warmup", str(WARMUP), "--end-lr", "0", "--weight-decay", repr(WD), "--out-dir", ref]
    if CLIP[loss_mode] > 0:
        cmd += ["--max-grad-norm", repr(CLIP[loss_mode])]
    q = subprocess.run(cmd + list(extra), capture_output=True, text=True, timeout=300)
    if q.returncode != 0:
        fail(f"train_ref.py failed ({q.returncode}):\n{q.stdout}\n{q.stderr}")
    return ref


def one_mode(gk, work, model, rows_jsonl, init_dir, init, loss_mode):
    t0 = time.time()
    ds, batch = prepare(gk, work, model, rows_jsonl, loss_mode)
    out = gemmakit_run(gk, work, model, ds, init_dir, loss_mode, "f32", loss_mode)
    t_gk = time.time() - t0
    ref = oracle_run(model, batch, init_dir, loss_mode, os.path.join(work, f"oracle-{loss_mode}"))
    print(f"[{loss_mode}] gemmakit {t_gk:.1f} s, oracle {time.time() - t0 - t_gk:.1f} s", flush=True)

    want = check_steps(loss_mode, out, ref, STEPS)
    check_premises(loss_mode, loss_mode, want)

    a = read_safetensors(os.path.join(out, "adapter", "adapter_model.safetensors"))
    b = read_safetensors(os.path.join(ref, "adapter_model.safetensors"))
    compare_adapters(loss_mode, a, b, init)


def check_premises(label, loss_mode, want):
    """The reference run's records (losses.json's "steps") do what the comparison needs: the
    schedule starts at 0 and peaks at LR, and where the mode clips, some steps clip and some not."""
    check(want[0]["lr"] == 0.0 and max(w["lr"] for w in want) == LR, f"{label}: schedule {[w['lr'] for w in want]}")
    if CLIP[loss_mode] > 0:
        clipped = sum(w["grad_norm"] > CLIP[loss_mode] for w in want)
        check(0 < clipped < STEPS, f"{label}: clipping at {CLIP[loss_mode]} triggered on {clipped} of {STEPS} "
              f"steps (norms {[round(w['grad_norm'], 3) for w in want]}); the test wants some, not all")
        print(f"[{label}] clipping at {CLIP[loss_mode]}: {clipped} of {STEPS} steps clipped", flush=True)


def compare_adapters(label, a, b, init):
    """Final adapter a against the reference's b, both trained from init (see the module
    docstring for the bounds); prints the worst tensors."""
    check(set(a) == set(b) == set(init), f"{label}: adapter keys differ: {sorted((set(a) ^ set(b)) | (set(a) ^ set(init)))[:4]}")
    worst_max, worst_upd, moved = (0.0, ""), (0.0, ""), 0.0
    for k in sorted(set(a) & set(b) & set(init)):
        if not check(a[k].shape == b[k].shape, f"{label}: {k} shape {a[k].shape} vs {b[k].shape}"):
            continue
        x, y, x0 = a[k].astype(np.float64), b[k].astype(np.float64), init[k].astype(np.float64)
        r_max = float(np.abs(x - y).max() / max(np.abs(y).max(), 1e-30))
        upd_ref, upd_gk = y - x0, x - x0
        r_upd = float(np.linalg.norm(upd_gk - upd_ref) / max(np.linalg.norm(upd_ref), 1e-30))
        moved = max(moved, float(np.abs(upd_ref).max()))
        worst_max = max(worst_max, (r_max, k))
        worst_upd = max(worst_upd, (r_upd, k))
        check(r_max < 1e-3, f"{label}: {k}: max|gk - ref| / max|ref| = {r_max:.2e} (tol 1e-3)")
        check(r_upd < 1e-2, f"{label}: {k}: |upd_gk - upd_ref| / |upd_ref| = {r_upd:.2e} (tol 1e-2)")
    check(moved > 1e-3, f"{label}: the reference's parameters moved by at most {moved:.1e}: the test is too weak")
    print(f"[{label}] final adapter ({len(b)} tensors): worst max|diff|/max|ref| {worst_max[0]:.2e} ({worst_max[1]}), "
          f"worst update rel diff {worst_upd[0]:.2e}, all tensors {update_distance(a, b, init):.2e}, "
          f"largest update {moved:.2e}", flush=True)


def update_distance(a, b, init):
    """‖(a − init) − (b − init)‖ / ‖b − init‖ over every tensor at once: how differently two runs
    moved the adapter."""
    d = n = 0.0
    for k in set(init) & set(a) & set(b):
        x0 = init[k].astype(np.float64)
        ua, ub = a[k].astype(np.float64) - x0, b[k].astype(np.float64) - x0
        d += float(np.sum((ua - ub) ** 2))
        n += float(np.sum(ub ** 2))
    return math.sqrt(d / max(n, 1e-300))


def bf16_mode(gk, work, model, rows_jsonl, init_dir, init, loss_mode):
    """train.precision "bf16" against the oracle's --bf16-products over the same 5 steps. A bf16
    rounding is a step function, so two correct bf16 trainers that sum in different orders round
    some activations differently, and the toy model amplifies that; the bound is therefore the
    oracle's own spread, measured here: its bf16 run with f64 sums against its bf16 run with f32
    sums (docs/TRAIN.md, "Precision"). The losses are compared over the first BF16_LOSS_STEPS
    steps: the fifth follows the two largest updates, and there two correct runs separate as far
    as bf16 from f32 products (measured 2026-12-06 on an AMD Zen 5 host, through the GPU trainer
    on the emulator: steps 1-4 within 3.7e-4 of the oracle's bf16, the oracle's own spread up to
    1.1e-3; step 5 at 2.8e-3, where the oracle's f32-products run was 1.7e-3 from it). The
    adapter's update is still compared after all five."""
    ds = os.path.join(work, f"ds-{loss_mode}")  # one_mode's data set and f32 oracle run
    batch = batch_file(ds, work)[0]
    out = gemmakit_run(gk, work, model, ds, init_dir, loss_mode, "bf16", f"{loss_mode}-bf16")
    ref = oracle_run(model, batch, init_dir, loss_mode, os.path.join(work, f"oracle-{loss_mode}-bf16"), ["--bf16-products"])
    ref64 = oracle_run(model, batch, init_dir, loss_mode, os.path.join(work, f"oracle-{loss_mode}-bf16-f64"),
                       ["--bf16-products", "--f64"])
    ref32 = os.path.join(work, f"oracle-{loss_mode}")
    steps = {}
    for name, path in (("bf16", ref), ("bf16-f64", ref64), ("f32", ref32)):
        with open(os.path.join(path, "losses.json")) as f:
            steps[name] = json.load(f)["steps"]
    with open(os.path.join(out, "metrics.jsonl")) as f:
        got = [json.loads(line) for line in f if line.strip()]
    check(len(got) == STEPS, f"{loss_mode}-bf16: {len(got)} metrics lines, want {STEPS}")
    worst_loss, spread_loss, effect_loss = 0.0, 0.0, 0.0
    for i, g in enumerate(got[:BF16_LOSS_STEPS]):
        want = steps["bf16"][i]["loss"]
        worst_loss = max(worst_loss, abs(g["loss"] - want) / want)
        spread_loss = max(spread_loss, abs(steps["bf16-f64"][i]["loss"] - want) / want)
        effect_loss = max(effect_loss, abs(steps["f32"][i]["loss"] - want) / want)
    a = read_safetensors(os.path.join(out, "adapter", "adapter_model.safetensors"))
    b = read_safetensors(os.path.join(ref, "adapter_model.safetensors"))
    b64 = read_safetensors(os.path.join(ref64, "adapter_model.safetensors"))
    b32 = read_safetensors(os.path.join(ref32, "adapter_model.safetensors"))
    upd, upd_spread, upd_effect = update_distance(a, b, init), update_distance(b64, b, init), update_distance(b32, b, init)
    print(f"[{loss_mode}-bf16] losses: gemmakit against the oracle's bf16 {worst_loss:.2e} relative (the oracle's f32 "
          f"against f64 sums {spread_loss:.2e}, f32 products against bf16 {effect_loss:.2e}); adapter updates: "
          f"{upd:.2e} (oracle's spread {upd_spread:.2e}, bf16 against f32 {upd_effect:.2e})", flush=True)
    check(worst_loss < 2 * spread_loss + 1e-6, f"{loss_mode}-bf16: a step's loss is {worst_loss:.2e} from the oracle's "
          f"bf16, more than twice the oracle's own spread {spread_loss:.2e}")
    check(effect_loss > 1.5 * spread_loss and upd_effect > 1.5 * upd_spread,
          f"{loss_mode}-bf16: f32 products differ from bf16 by no more than the noise: the check distinguishes nothing")
    check(upd < 2 * upd_spread + 1e-3, f"{loss_mode}-bf16: the adapter update is {upd:.2e} from the oracle's bf16, "
          f"more than twice the oracle's own spread {upd_spread:.2e}")


def main():
    a = test_args()
    gk = a.gemmakit
    t0 = time.time()
    try:
        import torch  # noqa: F401
    except ImportError:
        print(f"SKIP: no torch in {sys.executable} (scripts/install_deps.sh)")
        sys.exit(77)  # ctest's SKIP_RETURN_CODE
    with work_dir(a.keep, "gk-train-oracle-") as work:
        model = make_model(gk, os.path.join(work, "model"), seed=7)
        rows = os.path.join(work, "rows.jsonl")
        make_short_rows(gk, work, rows, n=40, seed=11)
        init_dir = os.path.join(work, "init-adapter")
        init = write_init_adapter(model, init_dir)
        for mode in ("assistant", "all"):
            one_mode(gk, work, model, rows, init_dir, init, mode)
        bf16_mode(gk, work, model, rows, init_dir, init, "assistant")
    finish("train_oracle_e2e", t0)


if __name__ == "__main__":
    main()
