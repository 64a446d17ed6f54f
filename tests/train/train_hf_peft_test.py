#!/usr/bin/python3
"""`gemmakit train` against Hugging Face transformers + PEFT + torch AdamW themselves.

    train_hf_peft_test.py --gemmakit build/gemmakit [--keep DIR] [--devices cpu,cuda]

Skipped (status 77) where the interpreter lacks torch, transformers or peft: Debian packages
neither of the last two, so CI and this project's CPU machines skip it. scripts/device_check.sh
runs it on the GPU machine (torch 2.11, transformers 5.17, peft 0.21).

The other trainer tests compare against tests/oracle/train_ref.py, our own PyTorch transcription
of Gemma 4, PEFT's LoRA and the optax schedule. Here each of those is the real library:
  model      transformers' Gemma4ForCausalLM (AutoModelForCausalLM.from_pretrained of the
             checkpoint `gemmakit init` wrote, float32 weights, eager attention, TF32 off)
  adapter    PEFT's get_peft_model(LoraConfig(...)) on it, its factors set to the oracle test's
             initial values (so that test's premises hold here: its clipping threshold falls
             between the steps' norms), written by PEFT's save_pretrained. gemmakit, PEFT's
             PeftModel.from_pretrained and the oracle all start from PEFT's file.
  loss       transformers' own loss: labels = the tokens, -100 outside the loss mask, and
             num_items_in_batch = the step's target count, which makes the accumulated loss the
             mean over the step's targets, as the HF Trainer computes it with accumulation
  optimizer  torch.optim.AdamW, transformers.get_cosine_schedule_with_warmup (optax's warm-up
             cosine with end value 0: the same values), torch.nn.utils.clip_grad_norm_
The run is train_oracle_e2e_test.py's (tiny model seed 7, its rows, rank 4 / alpha 8 on all seven
projections, 5 steps of micro-batch 1 x accumulation 2, warm-up 2 to 1e-3, weight decay 0.2,
float32; loss modes assistant and all, the latter clipping at 17.5), plus tiny-e2b (per-layer
embeddings, KV sharing, double-wide MLP) and tiny-moe (the MoE block) in mode assistant.
Compared with that test's bounds (losses 1e-4, gradient norms 1e-3, the final adapters):
  gemmakit on each device against HF + PEFT
  the oracle against HF + PEFT, so that a disagreement says which side is wrong
and the adapters' module sets: PEFT's against the oracle's enumeration (no k/v projection on
KV-shared layers, no v_proj on K=V layers, nothing on the router or the experts).
"""
import json
import os
import sys
import time

import numpy as np

import train_oracle_e2e_test as ot
from train_common import (check, check_steps, finish, has_cuda_device, losses_as_metrics, make_short_rows,
                          read_safetensors, run, test_args, work_dir)

def hf_device():
    import torch
    # gemmakit's f32 trainer multiplies in IEEE float32: no TF32 on the GPU either.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def hf_base(model_dir, dev):
    import torch
    from transformers import AutoModelForCausalLM
    m = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    return m.to(dev)


def adapter_params(peft_model):
    """{key as PEFT saves it: parameter} for every LoRA factor (PEFT drops the adapter name,
    "default", from the parameter's name on save)."""
    return {n.replace(".default.", "."): p for n, p in peft_model.named_parameters()
            if ".lora_A." in n or ".lora_B." in n}


def make_peft_adapter(model_dir, values, out_dir, dev):
    """PEFT's own adapter over the model, factors set to values, saved by PEFT."""
    import torch
    from peft import LoraConfig, get_peft_model
    cfg = LoraConfig(r=ot.RANK, lora_alpha=int(ot.ALPHA), lora_dropout=0.0, target_modules=ot.TARGETS, bias="none",
                     task_type="CAUSAL_LM")
    pm = get_peft_model(hf_base(model_dir, dev), cfg)
    params = adapter_params(pm)
    ok = check(set(params) == set(values), f"{model_dir}: PEFT adapts other modules than the oracle: only PEFT "
               f"{sorted(set(params) - set(values))[:4]}, only the oracle {sorted(set(values) - set(params))[:4]}")
    if not ok:
        return False
    with torch.no_grad():
        for k, p in params.items():
            if not check(tuple(p.shape) == values[k].shape, f"{k}: PEFT's shape {tuple(p.shape)}, the oracle's {values[k].shape}"):
                return False
            p.copy_(torch.from_numpy(values[k]))
    pm.save_pretrained(out_dir)
    saved = read_safetensors(os.path.join(out_dir, "adapter_model.safetensors"))
    return check(set(saved) == set(values) and all(np.array_equal(saved[k], values[k]) for k in values),
                 f"{out_dir}: PEFT saved other keys or values than it was given")


def hf_train(model_dir, init_dir, batch_path, loss_mode, out_dir, dev):
    """HF + PEFT + torch AdamW over the oracle test's steps; writes out_dir/adapter_model.safetensors
    (PEFT's save_pretrained) and out_dir/losses.json (train_ref.py's layout)."""
    import torch
    from peft import PeftModel
    from transformers import get_cosine_schedule_with_warmup
    pm = PeftModel.from_pretrained(hf_base(model_dir, dev), init_dir, is_trainable=True)
    params = adapter_params(pm)
    init = read_safetensors(os.path.join(init_dir, "adapter_model.safetensors"))
    loaded = set(params) == set(init) and all(
        np.array_equal(p.detach().cpu().numpy(), init[k]) for k, p in params.items())
    if not check(loaded, f"{init_dir}: PeftModel.from_pretrained did not load every factor of the file"):
        return None
    trainable = [p for p in pm.parameters() if p.requires_grad]
    check(len(trainable) == len(params), f"PEFT trains {len(trainable)} tensors, the adapter has {len(params)}")
    pm.train()
    opt = torch.optim.AdamW(trainable, lr=ot.LR, betas=(0.9, 0.999), eps=1e-8, weight_decay=ot.WD)
    sched = get_cosine_schedule_with_warmup(opt, num_warmup_steps=ot.WARMUP, num_training_steps=ot.STEPS)
    b = read_safetensors(batch_path)
    toks, mask, offs = b["tokens"].astype(np.int64), b["loss_mask"] != 0, b["offsets"]
    per, nrows = ot.MICRO * ot.ACCUM, len(offs) - 1
    clip = ot.CLIP[loss_mode] if ot.CLIP[loss_mode] > 0 else float("inf")
    recs = []
    for s in range(ot.STEPS):
        rows = [(s * per + j) % nrows for j in range(per)]  # shuffling off: step s takes rows 2s, 2s+1
        n = sum(int(mask[offs[i] + 1:offs[i + 1]].sum()) for i in rows)
        opt.zero_grad(set_to_none=True)
        loss = 0.0
        for i in rows:  # micro-batch 1: one row per forward
            ids = torch.from_numpy(toks[offs[i]:offs[i + 1]]).to(dev)[None]
            targets = torch.from_numpy(mask[offs[i]:offs[i + 1]]).to(dev)[None]
            labels = torch.where(targets, ids, torch.full_like(ids, -100))
            out = pm(input_ids=ids, labels=labels, num_items_in_batch=n, use_cache=False)
            out.loss.backward()
            loss += float(out.loss.detach().double())
        norm = float(torch.nn.utils.clip_grad_norm_(trainable, clip))
        lr = opt.param_groups[0]["lr"]
        opt.step()
        sched.step()
        recs.append({"step": s + 1, "loss": loss, "grad_norm": norm, "lr": lr, "target_tokens": n})
    os.makedirs(out_dir, exist_ok=True)
    pm.save_pretrained(out_dir)
    with open(os.path.join(out_dir, "losses.json"), "w") as f:
        json.dump({"steps": recs}, f, indent=1)
    return out_dir


def one_model(gk, work, preset, rows_jsonl, modes, devices, dev):
    work = os.path.join(work, preset)
    os.makedirs(work, exist_ok=True)
    model = os.path.join(work, "model")
    run(gk, ["init", "--preset", preset, "--out", model, "--seed", 7])
    values = ot.write_init_adapter(model, os.path.join(work, "oracle-init"))
    init_dir = os.path.join(work, "peft-init")
    if not make_peft_adapter(model, values, init_dir, dev):
        return
    for mode in modes:
        tag = f"{preset} {mode}"
        t0 = time.time()
        ds, batch = ot.prepare(gk, work, model, rows_jsonl, mode)
        hf = hf_train(model, init_dir, batch, mode, os.path.join(work, f"hf-{mode}"), dev)
        if hf is None:
            continue
        t_hf = time.time() - t0
        with open(os.path.join(hf, "losses.json")) as f:
            ot.check_premises(f"{tag} HF", mode, json.load(f)["steps"])
        hf_adapter = read_safetensors(os.path.join(hf, "adapter_model.safetensors"))
        for d in devices:
            out = ot.gemmakit_run(gk, work, model, ds, init_dir, mode, "f32", f"{mode}-{d}", extra_args=["--device", d])
            check_steps(f"{tag} gemmakit {d} vs HF", out, hf, ot.STEPS)
            ot.compare_adapters(f"{tag} gemmakit {d} vs HF",
                                read_safetensors(os.path.join(out, "adapter", "adapter_model.safetensors")), hf_adapter,
                                values)
        ref = ot.oracle_run(model, batch, init_dir, mode, os.path.join(work, f"oracle-{mode}"))
        check_steps(f"{tag} oracle vs HF", None, hf, ot.STEPS, got=losses_as_metrics(ref))
        ot.compare_adapters(f"{tag} oracle vs HF", read_safetensors(os.path.join(ref, "adapter_model.safetensors")),
                            hf_adapter, values)
        print(f"[{tag}] HF + PEFT on {dev}: {t_hf:.1f} s; all runs {time.time() - t0:.1f} s", flush=True)


def main():
    def more(ap):
        ap.add_argument("--devices", help="gemmakit devices to train on, comma-separated (default: cpu, and cuda where "
                                          "`gemmakit devices` lists one)")

    a = test_args(more)
    gk = a.gemmakit
    t0 = time.time()
    try:
        import peft
        import torch
        import transformers
    except ImportError as e:
        print(f"SKIP: {sys.executable} has no {e.name} (this test needs torch, transformers and peft; "
              f"scripts/device_check.sh runs it on the GPU machine, which has them)")
        sys.exit(77)  # ctest's SKIP_RETURN_CODE
    devices = a.devices.split(",") if a.devices else ["cpu"] + (["cuda"] if has_cuda_device(gk) else [])
    dev = hf_device()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__}; "
          f"HF runs on {dev}, gemmakit on {', '.join(devices)}", flush=True)
    with work_dir(a.keep, "gk-train-hf-") as work:
        rows = os.path.join(work, "rows.jsonl")
        make_short_rows(gk, work, rows, n=40, seed=11)
        one_model(gk, work, "tiny", rows, ("assistant", "all"), devices, dev)
        for preset in ("tiny-e2b", "tiny-moe"):
            one_model(gk, work, preset, rows, ("assistant",), devices, dev)
    finish("train_hf_peft", t0)


if __name__ == "__main__":
    main()
