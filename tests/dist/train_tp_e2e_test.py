#!/usr/bin/python3
"""`mpirun -np N gemmakit train --tp T`: tensor-parallel LoRA training (with data parallelism
across the groups when N > T) equals one process.

    train_tp_e2e_test.py --gemmakit build/gemmakit

The recipe of train_dp_e2e_test.py (tiny random Gemma 4 model: 4 query heads, 2 KV heads on
sliding layers and 1 on full ones; rank 4, dropout 0.05, shuffled packed micro-batches of 2 rows,
accumulation 4, 6 steps, a checkpoint every 2 keeping 2), trained:
  (a) by one process;
  (b) by `mpirun -np 2 --tp 2` (each rank half the heads, MLP and vocabulary; the full layers'
      KV head replicated) and (c) `-np 4 --tp 2` (two tensor-parallel copies, data parallel to
      each other): every step's loss within 1e-5 (relative) of (a)'s and token counts exactly;
      grad_norm within 1e-3; the final adapter and the last checkpoint (put back together in
      the whole model's layout by rank 0) within 5e-2 of (a)'s largest value per tensor and
      1e-2 in norm. The exact check of tensor parallelism is the gradient of one micro-batch
      (MpiTensorParallelTest.TrainingGradientsEqualOneProcess, 1e-4 of each tensor's largest
      value); over steps the runs part as in train_dp_e2e_test.py: Adam moves an element whose
      gradient is tiny by ~lr whatever its size, so a difference in the order of the sums can
      grow to ~2 lr per step (2.4e-2 absolute over 6 steps at lr 2e-3, about a quarter of A's
      largest value 1/sqrt(128)), and the later gradients (their norm) follow the adapter.
      Tensor parallelism reorders far more sums than data parallelism (every o/down product
      and input gradient is a sum over ranks): step 1's gradient norm differs by 3e-6 against
      5e-10. Measured: losses within 1.3e-6, grad norms within 1.3e-4, the worst tensor (layer
      0's q_proj A at np 4, whose gradient is tiny after B = 0) 1.4e-2 of its largest value
      (data parallel: 6.5e-4), the rest below 5.6e-3;
  (d) (b)'s run resumed from its step-4 checkpoint with `-np 2 --tp 2` ends equal to (a); with
      `--tp 1` the resume is refused naming the tensor parallelism;
  (e) refused with a message and a non-zero exit: `-np 3 --tp 2`, and --tp with full
      fine-tuning;
  (f) `mpirun -np 2 gemmakit bench train --tp 2 --json` reports the bytes each rank hands to
      collectives per step and the scaling against the whole model on rank 0 alone.
Skipped (exit 77) without mpirun. Always --threads 1 per rank.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "train"))
sys.path.insert(0, HERE)
from train_common import check, env, fail, finish  # noqa: E402
from dist_common import gemmakit_or_skip, mpirun  # noqa: E402
from train_dp_e2e_test import STEPS, compare, recipe_maker  # noqa: E402


def train(gk, recipe, np_, tp, resume=False, ok=True):
    cmd = [gk, "train", "--config", recipe, "--threads", "1"] + (["--resume"] if resume else [])
    if tp > 1:
        cmd += ["--tp", str(tp)]
    if np_ > 1:
        cmd = mpirun(np_) + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL, env=env())
    if ok and p.returncode != 0:
        fail(f"np {np_} tp {tp}: exit status {p.returncode}:\n{p.stdout}\n{p.stderr[-3000:]}")
    return p


def main():
    gk = gemmakit_or_skip()
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="gk-tp-train-") as work:
        recipe = recipe_maker(gk, work)
        model = os.path.join(work, "model")

        rec_a, ref = recipe("a")
        train(gk, rec_a, 1, 1)
        # (b), (c)
        for np_ in (2, 4):
            rec, out = recipe(f"np{np_}")
            t1 = time.time()
            p = train(gk, rec, np_, 2)
            check(f"tensor parallel: 2 ranks per copy of the model, {np_ // 2} data-parallel" in p.stderr,
                  f"np {np_} tp 2: no 'tensor parallel' line:\n{p.stderr}")
            worst = compare(ref, out, f"np {np_} tp 2", max_err=5e-2, grad_norm_tol=1e-3)
            print(f"np {np_} tp 2: {STEPS} steps in {time.time() - t1:.1f} s, losses equal, adapter within "
                  f"{worst:.1e} of one process", flush=True)

        # (d) resume from checkpoint-4 of (b)'s run
        _, out_b = recipe("np2")
        rec_d, out_d = recipe("resume")
        shutil.copytree(out_b, out_d)
        shutil.rmtree(os.path.join(out_d, f"checkpoint-{STEPS}"))
        shutil.rmtree(os.path.join(out_d, "adapter"))
        p = train(gk, rec_d, 2, 1, resume=True, ok=False)
        check(p.returncode != 0 and "--tp 2" in p.stderr, f"(d) resume with --tp 1: {p.returncode} {p.stderr[-800:]}")
        train(gk, rec_d, 2, 2, resume=True)
        worst = compare(ref, out_d, "(d) resumed np 2 tp 2", max_err=5e-2, grad_norm_tol=1e-3)
        print(f"(d) resumed from checkpoint-4 with --tp 2: equal to one process ({worst:.1e}); --tp 1 refused",
              flush=True)

        # (e) refusals
        rec_e, _ = recipe("odd")
        p = train(gk, rec_e, 3, 2, ok=False)
        check(p.returncode != 0 and "needs a multiple of 2 ranks" in p.stderr, f"(e) -np 3 --tp 2: {p.stderr[-800:]}")
        rec_f, _ = recipe("full", **{"lora.full_finetune": True})
        p = train(gk, rec_f, 2, 2, ok=False)
        check(p.returncode != 0 and "full_finetune is not supported with --tp" in p.stderr,
              f"(e) full fine-tuning with --tp: {p.stderr[-800:]}")
        print("(e) -np 3 --tp 2 and full fine-tuning with --tp refused", flush=True)

        # (f) bench train --tp
        p = subprocess.run(mpirun(2) + [gk, "bench", "train",
                            "--model", model, "--seq-len", "64", "--rank", "4", "--steps", "1", "--threads", "1",
                            "--tp", "2", "--json"], capture_output=True, text=True, timeout=300, env=env())
        lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
        if check(p.returncode == 0 and len(lines) == 1, f"(f) bench train --tp 2: {p.returncode} {p.stderr[-1500:]}"):
            b = json.loads(lines[0])["tensor_parallel"]
            # Per step at least the row's embedding and two (T, D) all-reduces per layer, 4 bytes each.
            if check(b["ranks"] == 2 and b["one_rank_tokens_per_s"] > 0 and b["tp_bytes_per_step"] > 4 * 64 * 128 * 2,
                     f"(f) bench train --tp 2: {b}"):
                print(f"(f) bench train --tp 2: {b['scaling']:.2f}x rank 0 alone, "
                      f"{b['tp_bytes_per_step'] / 2**20:.2f} MiB per step and rank", flush=True)
    finish("train_tp_e2e", t0)


if __name__ == "__main__":
    main()
