#!/usr/bin/env python3
"""`gemmakit convert`, `merge` and `verify` end to end on the tiny Gemma 4 model.

* HF -> Tunix Orbax -> HF is exact (verify says "same", and the bytes are compared here too);
* PEFT -> Qwix Orbax -> PEFT is exact for an adapter whose k/v share their A factor, and a
  PEFT adapter with separate k/v A factors is refused (Qwix's kv_einsum has one A);
* the merge equals an independent numpy merge: round_bf16(W + alpha/r * B @ A) for every adapted
  tensor, to one bf16 ulp (f32 summation order), and untouched tensors are byte-identical;
* merging the same LoRA from PEFT and from its Qwix Orbax form gives the same checkpoint;
* one .safetensors file works as a checkpoint (convert, merge: same results as its directory);
* verify maps a checkpoint to GGUF names against a GGUF file: a bf16 export is "same", a q8_0
  one differs by at most Q8_0's half step; orbax -> gguf writes the same bytes as hf -> gguf;
* verify --logits runs both models; bad input gives one error line and a non-zero exit.
Runs with Debian's python3 (numpy); the oracle's safetensors reader is tests/oracle/gemma_ref.py.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "oracle"))
import gemma_ref  # noqa: E402

FAILURES = []


def check(cond, msg):
    if not cond:
        FAILURES.append(msg)
        print("FAIL:", msg, flush=True)
    return cond


def run(gk, args, ok=True):
    p = subprocess.run([gk] + args, capture_output=True, text=True)
    if ok:
        check(p.returncode == 0, f"gemmakit {' '.join(args)}: exit {p.returncode}\n{p.stderr}")
    return p


def tensors(path):
    out = {}
    files = [path] if path.endswith(".safetensors") else [
        os.path.join(path, f) for f in sorted(os.listdir(path)) if f.endswith(".safetensors")]
    for f in files:
        out.update(gemma_ref.read_safetensors(f))
    return out


def as_f32(entry):
    arr, dt = entry if isinstance(entry, tuple) else (entry, None)
    return np.asarray(arr, dtype=np.float32)


def write_adapter(d, model_tensors, r, alpha, shared_kv_a, seed):
    rng = np.random.default_rng(seed)
    out = {}
    modules = []
    for name in sorted(model_tensors):
        if not name.endswith(".weight") or ".layers." not in name:
            continue
        mod = name[:-len(".weight")]
        if not any(mod.endswith(s) for s in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")):
            continue
        w = as_f32(model_tensors[name])
        o, i = w.shape
        modules.append(mod)
        out[f"base_model.model.{mod}.lora_A.weight"] = (rng.uniform(-0.2, 0.2, (r, i)).astype(np.float32), "F32")
        out[f"base_model.model.{mod}.lora_B.weight"] = (rng.normal(0, 0.05, (o, r)).astype(np.float32), "F32")
    if shared_kv_a:  # Qwix shares one A for k and v of a fused kv_einsum
        for mod in modules:
            if mod.endswith("v_proj"):
                k = mod[:-len("v_proj")] + "k_proj"
                out[f"base_model.model.{mod}.lora_A.weight"] = out[f"base_model.model.{k}.lora_A.weight"]
    os.makedirs(d, exist_ok=True)
    gemma_ref.write_safetensors(os.path.join(d, "adapter_model.safetensors"), out, {"format": "pt"})
    with open(os.path.join(d, "adapter_config.json"), "w") as f:
        json.dump({"peft_type": "LORA", "r": r, "lora_alpha": alpha, "target_modules": ["q_proj", "k_proj", "v_proj",
                   "o_proj", "gate_proj", "up_proj", "down_proj"], "lora_dropout": 0.0, "bias": "none"}, f)
    return out


def bf16_bits(x):
    return gemma_ref.f32_to_bf16_bits(np.asarray(x, dtype=np.float32))


def raw_bits(entry):
    arr = np.asarray(entry[0] if isinstance(entry, tuple) else entry, dtype=np.float32)
    return bf16_bits(arr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemmakit", required=True)
    gk = ap.parse_args().gemmakit
    with tempfile.TemporaryDirectory(prefix="gk_bridge_") as w:
        base = os.path.join(w, "tiny")
        run(gk, ["init", "--preset", "tiny", "--out", base, "--seed", "3"])
        base_t = tensors(base)

        print("HF -> Orbax -> HF", flush=True)
        run(gk, ["convert", "--from", "hf", "--to", "orbax", "--in", base, "--out", os.path.join(w, "orbax"), "--step", "7"])
        step = os.path.join(w, "orbax", "7")
        check(os.path.isfile(os.path.join(step, "_CHECKPOINT_METADATA")), "no _CHECKPOINT_METADATA in the step")
        check(not any(n.endswith(".orbax-checkpoint-tmp") for n in os.listdir(os.path.join(w, "orbax"))), "tmp dir left")
        with open(os.path.join(step, "model_params", "_METADATA")) as f:
            names = list(json.load(f)["tree_metadata"])
        check(any("q_einsum" in n and "value" in n for n in names), f"no Tunix q_einsum leaf in _METADATA: {names[:5]}")
        back = os.path.join(w, "back")
        run(gk, ["convert", "--from", "orbax", "--to", "hf", "--in", step, "--out", back, "--config", base])
        back_t = tensors(back)
        check(sorted(back_t) == sorted(base_t), "round trip changed the tensor names")
        for n in base_t:
            if n in back_t:
                check(np.array_equal(raw_bits(base_t[n]), raw_bits(back_t[n])), f"round trip changed {n}")
        p = run(gk, ["verify", base, step, "--config", base])
        check(p.stdout.strip().endswith("same"), f"verify HF vs Orbax: {p.stdout}")
        dump = os.path.join(w, "dump")
        run(gk, ["convert", "--from", "orbax", "--to", "hf", "--in", step, "--out", dump])
        check("layers.0.attn.q_einsum.w" in tensors(dump), "plain dump lacks the tree-path names")

        print("PEFT <-> Qwix", flush=True)
        shared = os.path.join(w, "peft-shared")
        write_adapter(shared, base_t, r=4, alpha=8.0, shared_kv_a=True, seed=1)
        run(gk, ["convert", "--from", "peft", "--to", "qwix", "--in", shared, "--out", os.path.join(w, "qwix"), "--config", base])
        qstep = os.path.join(w, "qwix", "0")
        peft_back = os.path.join(w, "peft-back")
        run(gk, ["convert", "--from", "qwix", "--to", "peft", "--in", qstep, "--out", peft_back, "--config", base, "--alpha", "8"])
        a, b = tensors(os.path.join(shared, "adapter_model.safetensors")), tensors(os.path.join(peft_back, "adapter_model.safetensors"))
        check(sorted(a) == sorted(b), "PEFT -> Qwix -> PEFT changed the keys")
        for n in a:
            if n in b:
                check(np.array_equal(as_f32(a[n]), as_f32(b[n])), f"PEFT -> Qwix -> PEFT changed {n}")
        separate = os.path.join(w, "peft-separate")
        adapter = write_adapter(separate, base_t, r=4, alpha=8.0, shared_kv_a=False, seed=2)
        p = run(gk, ["convert", "--from", "peft", "--to", "qwix", "--in", separate, "--out", os.path.join(w, "qwix2"),
                     "--config", base], ok=False)
        check(p.returncode != 0 and "shares one" in p.stderr and len(p.stderr.strip().split("\n")) == 1,
              f"separate k/v A factors must be refused in one line: {p.returncode} {p.stderr}")

        print("merge", flush=True)
        merged = os.path.join(w, "merged")
        p = run(gk, ["merge", "--base", base, "--adapter", separate, "--out", merged])
        print("  " + p.stdout.strip(), flush=True)
        # Not a terminal: the progress is a line per file written, then the totals.
        files = [f for f in os.listdir(merged) if f.endswith(".safetensors")]
        check(all(f"merge: wrote {os.path.join(merged, f)}" in p.stderr for f in files) and "merge: done" in p.stderr,
              f"merge progress lines for {files}: {p.stderr!r}")
        merged_t = tensors(merged)
        scale = 8.0 / 4
        changed = 0
        for n, entry in base_t.items():
            mod = n[:-len(".weight")] if n.endswith(".weight") else None
            ka = f"base_model.model.{mod}.lora_A.weight"
            got = raw_bits(merged_t[n]).astype(np.int32)
            if ka in adapter:
                A = as_f32(adapter[ka]).astype(np.float64)
                B = as_f32(adapter[f"base_model.model.{mod}.lora_B.weight"]).astype(np.float64)
                W = as_f32(entry).astype(np.float64)
                delta = scale * (B @ A)
                want = bf16_bits((W + delta).astype(np.float32)).astype(np.int32)
                diff = np.abs(got - want)
                # One rounding to bf16 of an f32 sum: the same bits, or (summation order) the
                # neighbour; where W and the delta cancel, f32 error is relative to their size.
                gv = gemma_ref.bf16_bits_to_f32(got.astype(np.uint16)).astype(np.float64)
                wv = gemma_ref.bf16_bits_to_f32(want.astype(np.uint16)).astype(np.float64)
                tol = 2.0 ** -7 * np.abs(wv) + 1e-6 * (np.abs(W) + np.abs(delta))  # one ulp
                check(np.all(np.abs(gv - wv) <= tol), f"merge of {n}: off numpy's by more than one bf16 rounding")
                check(np.mean(diff == 0) > 0.95, f"merge of {n}: only {np.mean(diff == 0):.3f} bit-identical")
                changed += 1
            else:
                check(np.array_equal(got, raw_bits(entry).astype(np.int32)), f"merge changed the untouched {n}")
        check(changed > 0, "no tensor was merged")
        for f in ("config.json", "tokenizer.json"):
            check(os.path.isfile(os.path.join(merged, f)), f"merge did not copy {f}")
        # The same LoRA from its Qwix Orbax form (needs shared k/v A: use the shared adapter).
        m1, m2 = os.path.join(w, "merged-peft"), os.path.join(w, "merged-qwix")
        run(gk, ["merge", "--base", base, "--adapter", shared, "--out", m1])
        run(gk, ["merge", "--base", base, "--orbax", os.path.join(qstep, "model_params"), "--alpha", "8", "--out", m2])
        p = run(gk, ["verify", m1, m2])
        check(p.stdout.strip().endswith("same"), f"PEFT and Qwix merges differ: {p.stdout}")
        p = run(gk, ["verify", base, merged, "--logits"], ok=False)
        check(p.returncode == 1 and "logits on a" in p.stdout, f"verify --logits base vs merged: {p.returncode} {p.stdout}")
        p = run(gk, ["merge", "--base", base, "--adapter", shared, "--out", m1], ok=False)
        check(p.returncode == 1 and "already exists" in p.stderr, f"merge over an existing dir: {p.stderr}")

        print("one .safetensors file as the checkpoint", flush=True)
        one = os.path.join(base, "model.safetensors")
        run(gk, ["convert", "--from", "hf", "--to", "orbax", "--in", one, "--out", os.path.join(w, "orbax-one")])
        p = run(gk, ["verify", base, os.path.join(w, "orbax-one", "0"), "--config", one])
        check(p.stdout.strip().endswith("same"), f"verify HF dir vs Orbax from one file: {p.stdout}")
        m3 = os.path.join(w, "merged-one")
        run(gk, ["merge", "--base", one, "--adapter", shared, "--out", m3])
        check(sorted(os.listdir(m3)) == sorted(n for n in os.listdir(m1)), f"merge of one file: {os.listdir(m3)}")
        p = run(gk, ["verify", m1, m3])
        check(p.stdout.strip().endswith("same"), f"merge of the dir and of its one file differ: {p.stdout}")

        print("GGUF: export, verify against the source, orbax -> gguf", flush=True)
        g_bf16, g_q8 = os.path.join(w, "tiny-bf16.gguf"), os.path.join(w, "tiny-q8.gguf")
        run(gk, ["convert", "--from", "hf", "--to", "gguf", "--in", one, "--out", g_bf16, "--gguf-type", "bf16"])
        p = run(gk, ["verify", base, g_bf16, "--all"])
        check(p.stdout.strip().endswith("same") and "blk.0.attn_q.weight" in p.stdout and "rope_freqs.weight" in p.stdout,
              f"verify HF vs its bf16 GGUF: {p.stdout[-600:]}")
        run(gk, ["convert", "--from", "hf", "--to", "gguf", "--in", base, "--out", g_q8, "--gguf-type", "q8_0"])
        p = run(gk, ["verify", g_q8, base, "--all"], ok=False)
        rows = {m.group(1): (float(m.group(2)), float(m.group(3)))
                for m in re.finditer(r"^\| (\S+) \| ([0-9.e+-]+) \| ([0-9.e+-]+) \|$", p.stdout, re.M)}
        q = rows.get("blk.0.ffn_up.weight", (0, 1))
        # Q8_0 keeps x to within half a step of max|block| / 127 (plus the f16 scale's rounding).
        check(p.returncode == 1 and p.stdout.strip().endswith("different") and 0 < q[0] and q[1] < 0.6 / 127,
              f"verify q8_0 GGUF: want a small non-zero error on blk.0.ffn_up.weight, got {q}: {p.stdout[-400:]}")
        check(rows.get("blk.0.attn_norm.weight", (1, 1))[0] == 0, "q8_0 export changed a norm (they stay f32)")
        p = run(gk, ["verify", g_q8, base, "--atol", "0.01"])
        check(p.stdout.strip().endswith("same"), f"verify q8_0 GGUF within --atol 0.01: {p.stdout[-300:]}")
        p = run(gk, ["verify", step, g_bf16, "--config", base])
        check(p.stdout.strip().endswith("same"), f"verify Tunix Orbax vs the GGUF: {p.stdout[-300:]}")
        g_orbax = os.path.join(w, "from-orbax.gguf")
        run(gk, ["convert", "--from", "orbax", "--to", "gguf", "--in", step, "--config", base, "--out", g_orbax,
                 "--gguf-type", "bf16"])
        with open(g_bf16, "rb") as f1, open(g_orbax, "rb") as f2:
            check(f1.read() == f2.read(), "orbax -> gguf differs from hf -> gguf of the same weights")
        check(not any(".hf-tmp-" in n for n in os.listdir(w)), "orbax -> gguf left its temporary directory")
        for args, words in [(["verify", g_bf16, shared], "PEFT adapter cannot"),
                            (["verify", g_bf16, base, "--logits"], "does not load GGUF"),
                            (["convert", "--from", "orbax", "--to", "gguf", "--in", step, "--out", os.path.join(w, "n.gguf")],
                             "--config")]:
            p = run(gk, args, ok=False)
            lines = [l for l in p.stderr.strip().split("\n") if l]
            check(0 < p.returncode < 128 and len(lines) == 1 and words in p.stderr,
                  f"{' '.join(args[:4])}: want one error line with {words!r}, got {p.returncode}: {p.stderr}")

        print("bad input", flush=True)
        for args, words in [
            (["convert", "--from", "orbax", "--to", "hf", "--in", os.path.join(w, "nope"), "--out", os.path.join(w, "x")], ""),
            (["convert", "--from", "gguf", "--to", "hf", "--in", base, "--out", os.path.join(w, "y")], "not supported"),
            (["merge", "--base", base, "--adapter", os.path.join(w, "nope"), "--out", os.path.join(w, "z")], ""),
            (["verify", base, os.path.join(w, "nope")], ""),
            (["verify", base, step], "--config"),
        ]:
            p = run(gk, args, ok=False)
            lines = [l for l in p.stderr.strip().split("\n") if l]
            check(0 < p.returncode < 128 and len(lines) == 1 and words in p.stderr,
                  f"{' '.join(args[:5])}: want one error line with {words!r}, got {p.returncode}: {p.stderr}")
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)")
        return 1
    print("all bridge checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
