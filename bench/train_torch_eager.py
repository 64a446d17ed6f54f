#!/usr/bin/python3
"""PyTorch eager anchor for one LoRA SFT training step (docs/PERF.md, `bench train --compare-torch`).

Times forward + backward of the oracle's LoRA model (tests/oracle/train_ref.py, built on the
spec-derived reference tests/oracle/gemma_ref.py) on this CPU: one sequence of --seq-len tokens,
LoRA rank R on the targeted projections (default q/k/v/o/gate/up/down of every layer), loss =
mean NLL over all tokens (tied-embedding head + final softcap included).  --dtype bf16 (the
default): weights, activations and LoRA factors in bfloat16 (PyTorch's bf16 CPU kernels: oneDNN
matmuls on AVX-512 BF16); fp32: the weights widened to float32 exactly, everything in float32
(OpenBLAS/oneDNN sgemm).  The first --warmup steps are discarded; the rest are averaged.

Tuned as a PyTorch user on a CPU would: tcmalloc preloaded (Debian's libtcmalloc-minimal4; the
script re-executes itself with LD_PRELOAD when it is not loaded), OMP_WAIT_POLICY=PASSIVE (idle
OpenMP threads sleep instead of spinning against the main thread), torch.set_num_threads(--threads,
default os.cpu_count()), autograd's anomaly checks off.  --no-tune runs without the first two.

    bench/train_torch_eager.py --model DIR --seq-len 512 --rank 16 --steps 3 [--dtype bf16|fp32] [--json]
    bench/train_torch_eager.py --case g4_basic ...      # a tiny random checkpoint instead

The reference is written for clarity (plain masked-matrix attention, no fused kernels), as
eager PyTorch code is; at 270M and 512 tokens its time is the products'.  Run with Debian's
/usr/bin/python3 (torch 1.13).
"""

import argparse
import json
import os
import platform
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "oracle"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from train_ref import AdapterConfig, LoraGemma, make_adapter_config, random_adapter, row_nll  # noqa: E402

DEFAULT_TARGETS = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
TCMALLOC = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"


def tuned_or_reexec(argv):
    """Re-executes this script with tcmalloc preloaded and passive OpenMP waiting unless both are
    in place (LD_PRELOAD must be set before the process starts); returns the tuning applied."""
    if "--no-tune" in argv:
        return {"tcmalloc": False, "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "")}
    if not os.path.exists(TCMALLOC):
        sys.exit(f"{TCMALLOC} is missing: apt-get install libtcmalloc-minimal4 (or pass --no-tune)")
    if TCMALLOC not in os.environ.get("LD_PRELOAD", "") or os.environ.get("OMP_WAIT_POLICY") != "PASSIVE":
        env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE",
                   LD_PRELOAD=":".join(p for p in (TCMALLOC, os.environ.get("LD_PRELOAD", "")) if p))
        os.execve(sys.executable, [sys.executable, os.path.abspath(__file__)] + argv, env)
    return {"tcmalloc": True, "omp_wait_policy": "PASSIVE"}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", help="HF-layout checkpoint directory")
    src.add_argument("--case", help="make_checkpoint.py case to synthesise (tiny random model)")
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=None, help="lora_alpha (default 2*rank)")
    ap.add_argument("--targets", default=DEFAULT_TARGETS, help="comma-separated module suffixes")
    ap.add_argument("--steps", type=int, default=3, help="timed steps (after the warm-up)")
    ap.add_argument("--warmup", type=int, default=1, help="discarded first steps")
    ap.add_argument("--threads", type=int, default=None, help="default: os.cpu_count()")
    ap.add_argument("--optimizer", action="store_true", help="also time an AdamW step")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    ap.add_argument("--no-tune", action="store_true", help="without tcmalloc and OMP_WAIT_POLICY=PASSIVE")
    argv = sys.argv[1:] if argv is None else argv
    a = ap.parse_args(argv)
    tuning = tuned_or_reexec(argv)

    threads = a.threads or os.cpu_count()
    torch.set_num_threads(threads)
    torch.autograd.set_detect_anomaly(False)
    dtype = torch.bfloat16 if a.dtype == "bf16" else torch.float32
    tmp = None
    model_dir = a.model
    if a.case:
        import make_checkpoint
        tmp = tempfile.mkdtemp(prefix="train_bench_")
        model_dir = os.path.join(tmp, a.case)
        make_checkpoint.write_checkpoint(a.case, model_dir, "bf16")

    t_load = time.perf_counter()
    model = LoraGemma(model_dir, dtype)
    cfg_raw = make_adapter_config(a.rank, a.alpha if a.alpha is not None else 2.0 * a.rank,
                                  [t for t in a.targets.split(",") if t])
    model.attach(AdapterConfig(cfg_raw), random_adapter(model, cfg_raw, a.seed))
    t_load = time.perf_counter() - t_load
    params = list(model.params.values())
    n_lora = sum(p.numel() for p in params)
    n_base = sum(w.numel() for w in model.w.values())
    opt = torch.optim.AdamW(params, lr=1e-4) if a.optimizer else None

    rng = np.random.default_rng(a.seed)
    toks = [2] + rng.integers(3, model.cfg.vocab, a.seq_len - 1).tolist()
    mask = np.ones(a.seq_len, dtype=np.int64)           # loss over all tokens
    n_targets = a.seq_len - 1

    times, fwd_times = [], []
    for s in range(a.warmup + a.steps):
        for p in params:
            p.grad = None
        t0 = time.perf_counter()
        loss = row_nll(model, toks, mask) / n_targets
        t1 = time.perf_counter()
        loss.backward()
        if opt is not None:
            opt.step()
        t2 = time.perf_counter()
        if s >= a.warmup:
            times.append(t2 - t0)
            fwd_times.append(t1 - t0)
        if not a.json:
            tag = "warm-up" if s < a.warmup else "timed"
            print(f"step {s + 1} ({tag}): {t2 - t0:.3f} s (forward {t1 - t0:.3f} s), "
                  f"loss {float(loss):.4f}", file=sys.stderr)
    mean = float(np.mean(times))
    res = {
        "engine": "pytorch-eager (tests/oracle/train_ref.py LoraGemma)",
        "torch": torch.__version__, "threads": threads, "cpu": platform.processor() or platform.machine(),
        "model": os.path.abspath(model_dir) if a.model else f"case:{a.case} (bf16)",
        "family": model.cfg.family, "layers": model.cfg.L, "hidden": model.cfg.D,
        "vocab": model.cfg.vocab, "weight_dtype": model.weight_dtype,
        "compute_dtype": "bfloat16" if a.dtype == "bf16" else "float32", "tuning": tuning,
        "base_params": n_base, "lora_params": n_lora, "lora_modules": len(model.lora),
        "rank": a.rank, "targets": a.targets, "seq_len": a.seq_len, "optimizer_step": bool(opt),
        "warmup_steps": a.warmup, "timed_steps": len(times), "step_times_s": times,
        "mean_step_s": mean, "median_step_s": float(np.median(times)),
        "mean_forward_s": float(np.mean(fwd_times)),
        "mean_backward_s": mean - float(np.mean(fwd_times)),
        "tokens_per_s": a.seq_len / mean, "load_s": t_load, "loss": float(loss),
    }
    if a.json:
        print(json.dumps(res))
    else:
        print(f"{res['model']}: {a.seq_len} tokens, LoRA r={a.rank} on {len(model.lora)} projections "
              f"({n_lora} params), {threads} threads: mean step {mean:.3f} s "
              f"(forward {res['mean_forward_s']:.3f} s), {res['tokens_per_s']:.1f} tokens/s")
    if tmp:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
