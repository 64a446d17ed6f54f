#!/usr/bin/python3
"""`gemmakit train` killed and resumed logs bit for bit what an uninterrupted run logs.

    train_resume_e2e_test.py --gemmakit build/gemmakit [--keep DIR] [--seed N]

One recipe, three run directories (tiny random Gemma 4 model, ~19 short CodeV-R1-style rows
given as JSONL so that each run tokenizes them into RUN/dataset itself; rank 4, dropout 0.05
and shuffling ON, so the counter-based dropout masks and the per-epoch shuffle are exercised;
micro-batch 1 x accumulation 2, 10 steps, which crosses an epoch boundary (9 steps an epoch);
a checkpoint every 3 steps, keeping 2; always --threads 2):

  (a) uninterrupted.
  (b) SIGKILLed when RUN/metrics.jsonl reaches k lines (k drawn in [2, 8] from a seeded RNG),
      rerun with --resume, SIGKILLed again at a later line count (drawn in [k+1, 9]), resumed
      until it completes.  Each resume must say "resuming at step N" with N the newest complete
      checkpoint (none: it starts over, and says nothing).
  (c) SIGTERM when metrics.jsonl reaches k lines: exit status 143, the "stopped by signal 15 ...
      continue with --resume" line on stderr, and a checkpoint-<n> whose n is the number of
      metrics lines (the step in flight is abandoned, the last completed one saved); resumed.

Then for (b) and (c) against (a): every metrics line's loss, grad_norm and learning_rate equal
as parsed floats (bit for bit: JSON numbers are written with round-trip precision), and step,
epoch, tokens, target_tokens equal; the final adapters (RUN/adapter/adapter_model.safetensors)
tensor for tensor byte-identical, and the newest checkpoint's adapter and AdamW moments too.
After completion each run directory holds exactly keep_last checkpoint-<n> directories (the two
newest: 9 and 10) and nothing with ".tmp" in its name, and the resumed runs' training_run.json
names the checkpoint they resumed from.
"""
import json
import os
import random
import re
import signal
import subprocess
import time

from train_common import (check, count_lines, env, fail, finish, make_model, make_short_rows, read_metrics,
                          read_safetensors, test_args, work_dir, write_recipe)

STEPS, SAVE_EVERY, KEEP_LAST = 10, 3, 2
STEP_RE = re.compile(r"^step \d+/\d+ ", re.M)


def recipe_keys(model, rows, out):
    return {"model": model, "out": out, "seed": 5,
            "data.path": rows, "data.max_seq_len": 110, "data.loss": "assistant", "data.shuffle": True,
            "lora.rank": 4, "lora.alpha": 8, "lora.dropout": 0.05,
            "optim.learning_rate": 2e-3, "optim.warmup_steps": 2, "optim.weight_decay": 0.01,
            "optim.max_grad_norm": 1.0,
            "batch.micro_batch": 1, "batch.grad_accum": 2, "batch.max_steps": STEPS,
            "checkpoint.save_every": SAVE_EVERY, "checkpoint.keep_last": KEEP_LAST}


def start(gk, recipe, out, resume, tag):
    args = [gk, "train", "--config", recipe, "--threads", "2"] + (["--resume"] if resume else [])
    err = os.path.join(os.path.dirname(out), f"{os.path.basename(out)}.{tag}.stderr")
    with open(err, "w") as f:
        p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=f, stdin=subprocess.DEVNULL, env=env())
    return p, err


def stderr_text(err):
    """What the process (whose stderr goes to the file `err`) has written so far."""
    with open(err, errors="replace") as f:
        return f.read()


def wait_lines(p, err, out, k, timeout=120):
    """Waits until this process has logged a step of its own (a "step N/M" line on its stderr:
    by then a resumed run has cut metrics.jsonl back to its checkpoint) and RUN/metrics.jsonl
    has >= k complete lines; False if the process ended first."""
    path = os.path.join(out, "metrics.jsonl")
    t0 = time.time()
    while time.time() - t0 < timeout:
        if p.poll() is not None:
            return False
        if STEP_RE.search(stderr_text(err)) and count_lines(path) >= k:
            return True
        time.sleep(0.01)
    p.kill()
    fail(f"{out}: metrics.jsonl did not reach {k} lines in {timeout} s")


def complete_checkpoints(out):
    steps = []
    for name in os.listdir(out):
        if not name.startswith("checkpoint-"):
            continue
        try:
            with open(os.path.join(out, name, "trainer_state.json")) as f:
                if json.load(f).get("complete") is True:
                    steps.append(int(name[len("checkpoint-"):]))
        except (OSError, ValueError):
            pass
    return sorted(steps)


def resume_line_ok(text, before, out, tag):
    """The resumed run says where it resumed (or nothing, when there was no checkpoint)."""
    newest = before[-1] if before else 0
    if newest > 0:
        check(f"resuming at step {newest} of {STEPS}" in text, f"{out} {tag}: no 'resuming at step {newest} of "
              f"{STEPS}' on stderr:\n{text}")
    else:
        check("resuming at step" not in text, f"{out} {tag}: resumed though there was no checkpoint:\n{text}")


def finish_run(gk, recipe, out, tag):
    before = complete_checkpoints(out)
    p, err = start(gk, recipe, out, True, tag)
    rc = p.wait(timeout=300)
    text = stderr_text(err)
    check(rc == 0, f"{out} {tag}: exit status {rc}:\n{text}")
    resume_line_ok(text, before, out, tag)
    check("data: " not in text, f"{out} {tag}: the JSONL was tokenized again instead of reusing RUN/dataset:\n{text}")


def compare_runs(ref, out, what):
    a, b = read_metrics(ref), read_metrics(out)
    check(len(a) == STEPS and len(b) == STEPS, f"{what}: {len(b)} metrics lines, uninterrupted {len(a)}")
    for x, y in zip(a, b):
        for key in ("step", "epoch", "tokens", "target_tokens", "loss", "grad_norm", "learning_rate"):
            check(x[key] == y[key], f"{what}: step {x['step']}: {key} {y[key]!r}, uninterrupted {x[key]!r}")
    for rel in ("adapter/adapter_model.safetensors", f"checkpoint-{STEPS}/adapter_model.safetensors",
                f"checkpoint-{STEPS}/optimizer.safetensors"):
        ta, tb = read_safetensors(os.path.join(ref, rel)), read_safetensors(os.path.join(out, rel))
        check(set(ta) == set(tb) and len(ta) > 0, f"{what}: {rel}: tensor names differ")
        diff = [k for k in ta if k in tb and (ta[k].dtype != tb[k].dtype or ta[k].shape != tb[k].shape or
                                              ta[k].tobytes() != tb[k].tobytes())]
        check(not diff, f"{what}: {rel}: {len(diff)} tensors differ, e.g. {diff[:2]}")


def check_run_dir(out, what, resumed):
    names = os.listdir(out)
    ckpts = sorted(n for n in names if n.startswith("checkpoint-"))
    want = sorted(f"checkpoint-{s}" for s in sorted({s for s in range(SAVE_EVERY, STEPS + 1, SAVE_EVERY)} | {STEPS})
                  [-KEEP_LAST:])
    check(ckpts == want, f"{what}: checkpoint dirs {ckpts}, want {want} (keep_last {KEEP_LAST})")
    tmp = [n for n in names if ".tmp" in n]
    check(not tmp, f"{what}: leftover tmp entries {tmp}")
    with open(os.path.join(out, "training_run.json")) as f:
        run = json.load(f)
    check(run["steps"]["done"] == STEPS and run["stopped_early"] is False, f"{what}: training_run.json steps {run['steps']}")
    if resumed:
        check(isinstance(run["resumed_from"], str) and "checkpoint-" in run["resumed_from"],
              f"{what}: training_run.json resumed_from {run['resumed_from']!r}")


def main():
    def more(ap):
        ap.add_argument("--seed", type=int, default=20240611, help="seeds the kill points")

    a = test_args(more)
    gk = a.gemmakit
    rng = random.Random(a.seed)
    t0 = time.time()
    with work_dir(a.keep, "gk-train-resume-") as work:
        model = make_model(gk, os.path.join(work, "model"), seed=3)
        rows = os.path.join(work, "rows.jsonl")
        make_short_rows(gk, work, rows, n=40, seed=11)

        # (a) uninterrupted
        ref = os.path.join(work, "run-a")
        rec_a = write_recipe(os.path.join(work, "a.toml"), recipe_keys(model, rows, ref))
        p, err = start(gk, rec_a, ref, False, "run")
        rc = p.wait(timeout=300)
        text = stderr_text(err)
        if rc != 0:
            fail(f"(a): exit status {rc}:\n{text}")
        check("data: " in text and " kept" in text, f"(a): no data summary line on stderr:\n{text}")
        check_run_dir(ref, "(a)", resumed=False)
        metrics = read_metrics(ref)
        check(len({m["epoch"] for m in metrics}) == 2, f"(a): epochs {[m['epoch'] for m in metrics]}: want two")
        print(f"(a) uninterrupted: {STEPS} steps in {time.time() - t0:.1f} s; losses "
              f"{[round(m['loss'], 4) for m in metrics]}", flush=True)

        # (b) SIGKILL at random points, resume until done
        t1 = time.time()
        out = os.path.join(work, "run-b")
        rec_b = write_recipe(os.path.join(work, "b.toml"), recipe_keys(model, rows, out))
        k1 = rng.randint(2, 8)
        kills = [k1, rng.randint(k1 + 1, STEPS - 1)]
        for i, k in enumerate(kills):
            before = complete_checkpoints(out) if os.path.isdir(out) else []
            p, err = start(gk, rec_b, out, i > 0, f"kill{i}")
            if not wait_lines(p, err, out, k):
                # only possible when a race let the previous attempt save the step before k
                check(p.returncode == 0, f"(b) attempt {i}: exited ({p.returncode}) before {k} metrics lines:\n"
                      f"{stderr_text(err)}")
                print(f"(b) attempt {i} completed the run before line {k}", flush=True)
                break
            p.send_signal(signal.SIGKILL)
            rc = p.wait(timeout=60)
            check(rc == -signal.SIGKILL, f"(b) attempt {i}: status {rc} after SIGKILL")
            if i > 0:
                resume_line_ok(stderr_text(err), before, out, f"attempt {i}")
            print(f"(b) killed at {count_lines(os.path.join(out, 'metrics.jsonl'))} metrics lines (target {k}); "
                  f"complete checkpoints {complete_checkpoints(out)}, entries {sorted(os.listdir(out))}", flush=True)
        finish_run(gk, rec_b, out, "final")
        check_run_dir(out, "(b)", resumed=True)
        compare_runs(ref, out, "(b) SIGKILL + resume")
        print(f"(b) done in {time.time() - t1:.1f} s", flush=True)

        # (c) SIGTERM: checkpoint of the last completed step, exit 143, resume
        t1 = time.time()
        out = os.path.join(work, "run-c")
        rec_c = write_recipe(os.path.join(work, "c.toml"), recipe_keys(model, rows, out))
        k = rng.randint(2, 8)
        p, err = start(gk, rec_c, out, False, "term")
        if not wait_lines(p, err, out, k):
            fail(f"(c): exited ({p.returncode}) before {k} metrics lines:\n{stderr_text(err)}")
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=120)
        text = stderr_text(err)
        n = count_lines(os.path.join(out, "metrics.jsonl"))
        check(rc == 143, f"(c): exit status {rc} after SIGTERM, want 143:\n{text}")
        check("stopped by signal 15" in text and "--resume" in text,
              f"(c): no 'stopped by signal 15 ... --resume' message on stderr:\n{text}")
        ck = complete_checkpoints(out)
        check(ck and ck[-1] == n, f"(c): newest checkpoint {ck}, metrics lines {n}: want checkpoint-{n}")
        check(not os.path.exists(os.path.join(out, "adapter")), "(c): a stopped run wrote the final adapter")
        print(f"(c) SIGTERM at {k}+ lines: status {rc}, {n} steps done, checkpoints {ck}", flush=True)
        finish_run(gk, rec_c, out, "final")
        check_run_dir(out, "(c)", resumed=True)
        compare_runs(ref, out, "(c) SIGTERM + resume")
        print(f"(c) done in {time.time() - t1:.1f} s", flush=True)
    finish("train_resume_e2e", t0)


if __name__ == "__main__":
    main()
