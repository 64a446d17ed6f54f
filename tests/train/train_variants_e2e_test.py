#!/usr/bin/python3
"""`gemmakit train` on the Gemma 4 variants beyond the dense model (tiny-e2b: per-layer
embeddings, KV sharing, double-wide MLP; tiny-moe: the MoE block), end to end.

For each variant: `gemmakit init --preset P`, two short Verilog rows, a LoRA run of 12 steps over
the same micro-batch of both rows; the loss must fall (the last step's below 0.9 of the first),
the adapter must hold exactly the modules the variant has (no k_proj / v_proj on KV-shared
layers, nothing on the router or the experts), and the adapter must load back into `merge`.
Bad input: an initial adapter with a k_proj factor on a KV-shared layer is refused with one
error line that names the tensor. The gradients themselves are checked against PyTorch in
src/model/train/training_oracle_test.cc.

    train_variants_e2e_test.py --gemmakit build/gemmakit
"""

import argparse
import json
import os
import re
import shutil
import struct
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_common import check, finish, make_short_rows, read_metrics, read_safetensors, run, write_recipe  # noqa: E402

VARIANTS = {
    # preset: (layers, KV-shared layers, K=V layers (no v_proj))
    "tiny-e2b": (6, {4, 5}, set()),
    "tiny-moe": (6, set(), {5}),
}


def module_keys(adapter_dir):
    tensors = read_safetensors(os.path.join(adapter_dir, "adapter_model.safetensors"))
    mods = set()
    for k in tensors:
        m = re.match(r"base_model\.model\.model\.layers\.(\d+)\.(.+)\.lora_[AB]\.weight$", k)
        check(m is not None, f"unexpected adapter key {k}")
        if m:
            mods.add((int(m.group(1)), m.group(2)))
    return tensors, mods


def one_variant(gk, work, preset, rows_path):
    layers, shared, k_eq_v = VARIANTS[preset]
    model = os.path.join(work, preset)
    run(gk, ["init", "--preset", preset, "--out", model, "--seed", 1])
    out = os.path.join(work, "run-" + preset)
    recipe = write_recipe(os.path.join(work, preset + ".toml"), {
        "model": model, "out": out, "seed": 0,
        "data.path": rows_path, "data.max_seq_len": 512, "data.loss": "assistant", "data.shuffle": False,
        "lora.rank": 8, "lora.alpha": 16, "lora.dropout": 0.0,
        "optim.learning_rate": 5e-3, "optim.warmup_steps": 2, "optim.weight_decay": 0.0,
        "batch.micro_batch": 2, "batch.grad_accum": 1, "batch.max_steps": 12,
        "memory.remat": True, "checkpoint.save_every": 6, "checkpoint.keep_last": 1, "log.log_every": 1,
    })
    run(gk, ["train", "--config", recipe, "--threads", 2], timeout=600)
    losses = [m["loss"] for m in read_metrics(out) if "loss" in m]
    check(len(losses) == 12, f"{preset}: {len(losses)} step losses in metrics.jsonl, expected 12")
    if losses:
        print(f"{preset}: loss {losses[0]:.4f} -> {losses[-1]:.4f}", flush=True)
        check(all(x == x and x < 100 for x in losses), f"{preset}: non-finite losses {losses}")
        check(losses[-1] < 0.9 * losses[0], f"{preset}: the loss did not fall: {losses}")

    adapter = os.path.join(out, "adapter")
    tensors, mods = module_keys(adapter)
    for l in range(layers):
        for proj in ("self_attn.q_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"):
            check((l, proj) in mods, f"{preset}: adapter lacks layer {l} {proj}")
        for proj in ("self_attn.k_proj", "self_attn.v_proj"):
            want = l not in shared and not (proj == "self_attn.v_proj" and l in k_eq_v)
            check(((l, proj) in mods) == want, f"{preset}: layer {l} {proj} {'missing' if want else 'present'}")
    check(not any("router" in p or "experts" in p or "per_layer" in p for _, p in mods),
          f"{preset}: adapter has modules on frozen parts: {sorted(mods)}")
    trained_b = [k for k in tensors if k.endswith("lora_B.weight") and abs(tensors[k]).max() > 0]
    check(len(trained_b) == len(mods), f"{preset}: {len(mods) - len(trained_b)} modules kept B = 0")

    merged = os.path.join(work, "merged-" + preset)
    run(gk, ["merge", "--base", model, "--adapter", adapter, "--out", merged])
    check(os.path.exists(os.path.join(merged, "config.json")), f"{preset}: merge wrote no config.json")
    return model, adapter


def bad_init_adapter(gk, work, model, adapter, rows_path):
    """An adapter with a k_proj factor on KV-shared layer 5 of tiny-e2b: one error line."""
    bad = os.path.join(work, "bad-adapter")
    shutil.copytree(adapter, bad)
    path = os.path.join(bad, "adapter_model.safetensors")
    tensors, header = read_safetensors(path, with_meta=True)
    src = "base_model.model.model.layers.3.self_attn.k_proj"
    dst = "base_model.model.model.layers.5.self_attn.k_proj"
    # Append two F32 tensors (layer 3's k_proj factors under layer 5's name) to the file.
    meta = {k: v for k, v in header.items()}
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    body = bytearray(data[8 + n:])
    for suffix in (".lora_A.weight", ".lora_B.weight"):
        arr = tensors[src + suffix].astype("<f4")
        meta[dst + suffix] = {"dtype": "F32", "shape": list(arr.shape),
                              "data_offsets": [len(body), len(body) + arr.nbytes]}
        body += arr.tobytes()
    head = json.dumps(meta).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head + bytes(body))
    recipe = write_recipe(os.path.join(work, "bad.toml"), {
        "model": model, "out": os.path.join(work, "run-bad"), "data.path": rows_path,
        "lora.rank": 8, "lora.alpha": 16, "lora.init_adapter": bad,
        "batch.micro_batch": 1, "batch.grad_accum": 1, "batch.max_steps": 1,
    })
    p = run(gk, ["train", "--config", recipe], ok=False)
    lines = [l for l in p.stderr.splitlines() if "error" in l]
    check(p.returncode == 1, f"bad init adapter: exit {p.returncode}, expected 1")
    check(len(lines) == 1 and lines[0].startswith("gemmakit: error: ") and dst in lines[0],
          f"bad init adapter: want one error line naming {dst}, got {p.stderr!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemmakit", required=True)
    a = ap.parse_args()
    t0 = time.time()
    work = tempfile.mkdtemp(prefix="gk_train_variants_")
    try:
        rows = os.path.join(work, "rows.jsonl")
        make_short_rows(a.gemmakit, work, rows, 2, seed=3)
        model, adapter = None, None
        for preset in VARIANTS:
            m, ad = one_variant(a.gemmakit, work, preset, rows)
            if preset == "tiny-e2b":
                model, adapter = m, ad
        bad_init_adapter(a.gemmakit, work, model, adapter, rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    finish("train_variants_e2e", t0)


if __name__ == "__main__":
    main()
