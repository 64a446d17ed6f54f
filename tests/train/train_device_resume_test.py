#!/usr/bin/python3
"""A run trained on the GPU resumes on the CPU, and one trained on the CPU resumes on the GPU.

    train_device_resume_test.py --gemmakit build/gemmakit [--keep DIR]

Skipped (status 77) where `gemmakit devices` lists no CUDA device; scripts/device_check.sh runs
it on the GPU machine, and make test with the CUDA emulator's gemmakit_emulated
(emulated_train_device_resume, docs/CUDA_EMULATOR.md).

One recipe (tiny random Gemma 4, short CodeV-R1-style rows, rank 4, dropout 0.05, shuffling
on, micro-batch 1 x accumulation 2, 6 steps, a checkpoint every 3, train.precision f32), four
run directories:
  cpu        6 steps on the CPU, uninterrupted (the reference)
  gpu        6 steps on the GPU, uninterrupted
  gpu->cpu   SIGTERM on the GPU once 3 steps are logged, resumed with --resume on the CPU
  cpu->gpu   the same the other way round
Checked: every run completes, the resumed ones say "resuming at step N" with N their newest
checkpoint; every step's loss and gradient norm within 1e-3 (relative) of the reference's (the
devices' f32 sums differ in order only: a resume that lost the factors, the moments or the data
order moves the loss by far more from the next step on); and the final adapters within 2 % of
the reference's scale per tensor (Adam turns last-bit gradient differences into lr-sized moves
on elements whose gradient is tiny: tests/train/train_oracle_e2e_test.py explains the bound).
"""
import os
import signal
import subprocess
import sys
import time

import numpy as np

from train_common import (check, count_lines, env, fail, finish, has_cuda_device, make_model, make_short_rows,
                          read_metrics, read_safetensors, test_args, work_dir, write_recipe)

STEPS = 6


def recipe_keys(model, rows, out):
    return {"model": model, "out": out, "seed": 3,
            "data.path": rows, "data.max_seq_len": 110, "data.loss": "assistant", "data.shuffle": True,
            "lora.rank": 4, "lora.alpha": 8, "lora.dropout": 0.05,
            "optim.learning_rate": 2e-3, "optim.warmup_steps": 2, "optim.weight_decay": 0.01,
            "batch.micro_batch": 1, "batch.grad_accum": 2, "batch.max_steps": STEPS,
            "checkpoint.save_every": 3, "checkpoint.keep_last": 2, "train.precision": "f32"}


def train(gk, recipe, out, device, resume=False, stop_after=0):
    """Runs `train`; with stop_after, SIGTERMs it once out/metrics.jsonl has that many lines."""
    args = [gk, "train", "--config", recipe, "--threads", "2", "--device", device] + (["--resume"] if resume else [])
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env())
    if stop_after:
        t0 = time.time()
        while p.poll() is None and count_lines(os.path.join(out, "metrics.jsonl")) < stop_after:
            if time.time() - t0 > 300:
                p.kill()
                fail(f"{out}: {stop_after} steps not logged in 300 s")
            time.sleep(0.01)
        p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=300)
    want = (0, 143) if stop_after else (0,)
    check(p.returncode in want, f"{' '.join(args)}: exit status {p.returncode}:\n{err}")
    return err


def main():
    a = test_args()
    gk = a.gemmakit
    if not has_cuda_device(gk):
        print("SKIP: no CUDA device (gemmakit devices)")
        sys.exit(77)
    t0 = time.time()
    with work_dir(a.keep, "gk-train-device-") as work:
        model = make_model(gk, os.path.join(work, "model"))
        rows = os.path.join(work, "rows.jsonl")
        make_short_rows(gk, work, rows, 19, 5)
        runs = {}
        for name in ("cpu", "gpu", "gpu-cpu", "cpu-gpu"):
            out = os.path.join(work, name)
            runs[name] = (write_recipe(os.path.join(work, name + ".toml"), recipe_keys(model, rows, out)), out)
        train(gk, *runs["cpu"], "cpu")
        train(gk, *runs["gpu"], "cuda")
        for name, first, second in (("gpu-cpu", "cuda", "cpu"), ("cpu-gpu", "cpu", "cuda")):
            recipe, out = runs[name]
            train(gk, recipe, out, first, stop_after=3)
            saved = sorted(int(d.split("-")[1]) for d in os.listdir(out) if d.startswith("checkpoint-"))
            check(bool(saved), f"{name}: no checkpoint after the SIGTERM")
            err = train(gk, recipe, out, second, resume=True)
            if saved:
                check(f"resuming at step {saved[-1]} of {STEPS}" in err, f"{name}: no 'resuming at step {saved[-1]}':\n{err}")
        ref = read_metrics(runs["cpu"][1])
        ref_adapter = read_safetensors(os.path.join(runs["cpu"][1], "adapter", "adapter_model.safetensors"))
        for name in ("gpu", "gpu-cpu", "cpu-gpu"):
            out = runs[name][1]
            got = read_metrics(out)
            check(len(got) == len(ref) == STEPS, f"{name}: {len(got)} steps logged, the reference {len(ref)}")
            for r, g in zip(ref, got):
                for key in ("loss", "grad_norm"):
                    check(abs(g[key] - r[key]) <= 1e-3 * abs(r[key]),
                          f"{name} step {g['step']}: {key} {g[key]} vs the CPU's {r[key]}")
            adapter = read_safetensors(os.path.join(out, "adapter", "adapter_model.safetensors"))
            check(sorted(adapter) == sorted(ref_adapter), f"{name}: the adapter's tensors differ from the CPU run's")
            for k, want in ref_adapter.items():
                if k not in adapter:
                    continue
                err = float(np.max(np.abs(adapter[k] - want))) / max(float(np.max(np.abs(want))), 1e-30)
                check(err < 2e-2, f"{name}: {k} off by {err:.2e} of its scale")
    finish("train_device_resume", t0)


if __name__ == "__main__":
    main()
