#!/usr/bin/env python3
"""Write a small random Hugging Face-layout Gemma 4 / Gemma 3 checkpoint (spec section 2).

    make_checkpoint.py --case g4_basic --out DIR [--dtype f32|bf16] [--shards K] [--layout L] [--seed S]

Writes DIR/config.json plus DIR/model.safetensors, or (with --shards K >= 2)
DIR/model-0000i-of-0000K.safetensors + DIR/model.safetensors.index.json.  Weights are seeded
(case name + --seed), so the same command always writes the same bytes.

Layouts
  multimodal  Gemma4ForConditionalGeneration, LM under text_config (model_type gemma4_text),
              tensors under model.language_model.*, plus fake model.vision_tower.* /
              model.embed_vision.* (and model.audio_tower.* for E2B-like cases) that a
              text-only engine must skip.
  text        Gemma4ForCausalLM, gemma4_text keys at the top level, tensors under model.*.
  gemma3      Gemma3ForCausalLM, model_type gemma3_text, tensors under model.*.

Scales: projections ~ N(0, 1/in) (std in^-0.5); gemma4 layer norms ~ 1 +- 0.1, q/k norms
~ 0.7 +- 0.1 (keeps scale-1.0 attention from saturating); gemma3 (1+w) norms ~ 0 +- 0.1;
layer_scalar ~ U[0.5, 1.5]; router weights std 1.5, per_expert_scale ~ U[0.5, 1.5].
Embeddings std 0.15 with a final norm weight ~3 (gemma3: 1+w ~ 3): the layers dominate the
residual stream (the argmax is mostly not the input token) and logits reach ~12, so a final
softcap of 15 is strongly non-linear.
"""

import argparse
import json
import math
import os
import sys
import zlib

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gemma_ref import write_safetensors  # noqa: E402

S, F_ = "sliding_attention", "full_attention"

G4_BASE = dict(
    family="gemma4", layout="multimodal", vocab=512, D=64, L=6,
    layer_types=[S, S, S, S, S, F_], N=4, K=2, H=32, HG=64, KG=1, k_eq_v=True,
    window=8, F=128, softcap=15.0, eps=1e-6, P=0, S_shared=0, double_wide=False,
    moe=False, E=0, topk=0, Fe=0, rope_sliding=10000.0, rope_full=1000000.0, partial=0.25,
    audio=False, shards=1,
)

CASES = {
    # 31B-like: K=V on full layers, one global KV head, global head dim 2x the sliding one.
    "g4_basic": dict(G4_BASE),
    # E4B-like attention: separate v_proj on full layers, num_global_key_value_heads null.
    "g4_noshare_kv": dict(G4_BASE, k_eq_v=False, KG=None),
    # E2B-like: PLE, KV sharing of the last 2 layers, double-wide MLP in shared layers,
    # D=48 (sqrt(48) is not a bf16 value; D != N*H), audio tower tensors, softcap 30.
    "g4_ple_kvshare": dict(G4_BASE, D=48, L=8, layer_types=[S, S, S, F_, S, S, S, F_], K=1,
                           k_eq_v=False, KG=None, F=96, P=16, S_shared=2, double_wide=True,
                           softcap=30.0, audio=True),
    # 26B-A4B-like: dense MLP plus 4 experts, top-2.
    "g4_moe": dict(G4_BASE, F=64, moe=True, E=4, topk=2, Fe=32),
    # text-only export (top-level gemma4_text config, model.* prefix), sharded into 3 files,
    # D=80 (sqrt(80) rounds to 8.9375 in bf16).
    "g4_textonly_sharded": dict(G4_BASE, layout="text", D=80, shards=3),
    # g4_basic as transformers >= 5.15 saves it: the full layer's shape in per_layer_config, no
    # global_head_dim / num_global_key_value_heads, `dtype` only.
    "g4_per_layer": dict(G4_BASE, per_layer={5: {"head_dim": 64, "num_key_value_heads": 1}}),
    # Every layer its own shape: full layers with 1 and 2 kv heads, a sliding layer with head dim
    # 16 (a third RoPE table), another with one kv head; sizes the released keys cannot say.
    "g4_per_layer_mixed": dict(G4_BASE, L=8, layer_types=[S, S, S, F_, S, S, S, F_],
                               per_layer={1: {"num_key_value_heads": 1}, 3: {"head_dim": 64, "num_key_value_heads": 1},
                                          5: {"head_dim": 16}, 7: {"head_dim": 64, "num_key_value_heads": 2}}),
    # Gemma 3 (270M/1B-like): (1+w) norms, query_pre_attn_scalar != head_dim, no softcap.
    "g3_basic": dict(family="gemma3", layout="gemma3", vocab=512, D=64, L=6,
                     layer_types=[S, S, S, S, S, F_], N=4, K=1, H=32, window=8, F=128,
                     eps=1e-6, qpas=48.0, rope_sliding=10000.0, rope_full=1000000.0, shards=1),
}


def case_spec(name):
    if name not in CASES:
        raise SystemExit(f"unknown case {name!r}; known: {', '.join(CASES)}")
    return dict(CASES[name])


def text_config(s, dtype):
    if s["family"] == "gemma3":
        return {
            "model_type": "gemma3_text", "vocab_size": s["vocab"], "hidden_size": s["D"],
            "intermediate_size": s["F"], "num_hidden_layers": s["L"],
            "num_attention_heads": s["N"], "num_key_value_heads": s["K"], "head_dim": s["H"],
            "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 32768,
            "rms_norm_eps": s["eps"], "pad_token_id": 0, "eos_token_id": 1, "bos_token_id": 2,
            "tie_word_embeddings": True, "rope_theta": s["rope_full"],
            "rope_local_base_freq": s["rope_sliding"], "rope_scaling": None,
            "attention_bias": False, "attention_dropout": 0.0,
            "query_pre_attn_scalar": s["qpas"], "sliding_window": s["window"],
            "sliding_window_pattern": 6, "layer_types": s["layer_types"],
            "final_logit_softcapping": None, "attn_logit_softcapping": None,
            "torch_dtype": dtype, "use_cache": True,
        }
    tc = {
        "model_type": "gemma4_text", "vocab_size": s["vocab"], "hidden_size": s["D"],
        "intermediate_size": s["F"], "num_hidden_layers": s["L"],
        "num_attention_heads": s["N"], "num_key_value_heads": s["K"], "head_dim": s["H"],
        "global_head_dim": s["HG"], "num_global_key_value_heads": s["KG"],
        "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 131072,
        "rms_norm_eps": s["eps"], "pad_token_id": 0, "eos_token_id": 1, "bos_token_id": 2,
        "tie_word_embeddings": True,
        "rope_parameters": {
            F_: {"rope_type": "proportional", "partial_rotary_factor": s["partial"],
                 "rope_theta": s["rope_full"]},
            S: {"rope_type": "default", "rope_theta": s["rope_sliding"]},
        },
        "attention_bias": False, "attention_dropout": 0.0, "sliding_window": s["window"],
        "layer_types": s["layer_types"], "final_logit_softcapping": s["softcap"],
        "use_bidirectional_attention": "vision" if s["k_eq_v"] else None,
        "vocab_size_per_layer_input": s["vocab"], "hidden_size_per_layer_input": s["P"],
        "attention_k_eq_v": s["k_eq_v"], "num_kv_shared_layers": s["S_shared"],
        "enable_moe_block": s["moe"], "use_double_wide_mlp": s["double_wide"],
        "num_experts": s["E"] or None, "top_k_experts": s["topk"] or None,
        "moe_intermediate_size": s["Fe"] or None, "dtype": dtype,
    }
    if "per_layer" in s:
        del tc["global_head_dim"], tc["num_global_key_value_heads"]
        tc["per_layer_config"] = {str(l): dict(ov) for l, ov in s["per_layer"].items()}
    return tc


def full_config(s, dtype):
    tc = text_config(s, dtype)
    if s["layout"] == "gemma3":
        return dict(tc, architectures=["Gemma3ForCausalLM"])
    if s["layout"] == "text":
        return dict(tc, architectures=["Gemma4ForCausalLM"])
    cfg = {
        "architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4",
        "text_config": tc,
        "vision_config": {"model_type": "gemma4_vision", "hidden_size": 16,
                          "num_hidden_layers": 1, "num_attention_heads": 2, "head_dim": 8,
                          "intermediate_size": 32},
        "boi_token_id": 255999, "eoi_token_id": 258882, "image_token_id": 258880,
        "video_token_id": 258884, "boa_token_id": 256000, "eoa_token_id": 258883,
        "audio_token_id": 258881, "eos_token_id": [1, 106], "tie_word_embeddings": True,
        "dtype": dtype, "transformers_version": "5.0.0",
    }
    if s.get("audio"):
        cfg["audio_config"] = {"model_type": "gemma4_audio", "hidden_size": 16}
    return cfg


def make_weights(s, seed):
    """{hf_key_without_prefix: float32 array} for the text decoder, plus extra full keys."""
    rng = np.random.default_rng(seed)
    D, L, N, V = s["D"], s["L"], s["N"], s["vocab"]
    g4 = s["family"] == "gemma4"

    def lin(out_f, in_f):
        return rng.standard_normal((out_f, in_f)).astype(np.float32) / np.float32(math.sqrt(in_f))

    def norm_w(n, center=None, spread=0.1):
        c = (1.0 if g4 else 0.0) if center is None else center
        return (c + spread * rng.standard_normal(n)).astype(np.float32)

    w = {}
    # Small embeddings so the layers (unit-RMS post-norm outputs) dominate the residual stream and
    # the logits are not just "repeat the input token"; a final norm weight ~3 brings the
    # tied-embedding logits back to a few units so the softcap matters.
    w["embed_tokens.weight"] = (s.get("embed_std", 0.15) * rng.standard_normal((V, D))).astype(np.float32)
    w["norm.weight"] = norm_w(D, 3.0 if g4 else 2.0, 0.3)
    first_shared = L - s.get("S_shared", 0) if s.get("S_shared", 0) else L
    for l in range(L):
        p = f"layers.{l}."
        full = s["layer_types"][l] == F_
        if g4 and "per_layer" in s:
            ov = s["per_layer"].get(l, {})
            H, K = ov.get("head_dim", s["H"]), ov.get("num_key_value_heads", s["K"])
            keqv = full and s["k_eq_v"]
        elif g4:
            H = s["HG"] if full else s["H"]
            K = (s["KG"] or s["K"]) if (full and s["k_eq_v"]) else s["K"]
            keqv = full and s["k_eq_v"]
        else:
            H, K, keqv = s["H"], s["K"], False
        w[p + "input_layernorm.weight"] = norm_w(D)
        w[p + "post_attention_layernorm.weight"] = norm_w(D)
        w[p + "pre_feedforward_layernorm.weight"] = norm_w(D)
        w[p + "post_feedforward_layernorm.weight"] = norm_w(D)
        w[p + "self_attn.q_proj.weight"] = lin(N * H, D)
        w[p + "self_attn.o_proj.weight"] = lin(D, N * H)
        qk_center = 0.7 if g4 else 0.0
        w[p + "self_attn.q_norm.weight"] = norm_w(H, qk_center)
        # KV-shared layers keep (stale) k/v/k_norm tensors that an engine must ignore.
        w[p + "self_attn.k_proj.weight"] = lin(K * H, D)
        w[p + "self_attn.k_norm.weight"] = norm_w(H, qk_center)
        if not keqv:
            w[p + "self_attn.v_proj.weight"] = lin(K * H, D)
        Fl = s["F"] * (2 if (s.get("double_wide") and l >= first_shared) else 1)
        w[p + "mlp.gate_proj.weight"] = lin(Fl, D)
        w[p + "mlp.up_proj.weight"] = lin(Fl, D)
        w[p + "mlp.down_proj.weight"] = lin(D, Fl)
        if g4:
            w[p + "layer_scalar"] = rng.uniform(0.5, 1.5, size=(1,)).astype(np.float32)
        if s.get("P"):
            P = s["P"]
            w[p + "per_layer_input_gate.weight"] = lin(P, D)
            w[p + "per_layer_projection.weight"] = lin(D, P)
            w[p + "post_per_layer_input_norm.weight"] = norm_w(D)
        if s.get("moe"):
            E, Fe = s["E"], s["Fe"]
            w[p + "router.proj.weight"] = (1.5 * rng.standard_normal((E, D))).astype(np.float32)
            w[p + "router.scale"] = norm_w(D)
            w[p + "router.per_expert_scale"] = rng.uniform(0.5, 1.5, size=(E,)).astype(np.float32)
            w[p + "experts.gate_up_proj"] = (rng.standard_normal((E, 2 * Fe, D)) /
                                             math.sqrt(D)).astype(np.float32)
            w[p + "experts.down_proj"] = (rng.standard_normal((E, D, Fe)) /
                                          math.sqrt(Fe)).astype(np.float32)
            w[p + "pre_feedforward_layernorm_2.weight"] = norm_w(D)
            w[p + "post_feedforward_layernorm_1.weight"] = norm_w(D)
            w[p + "post_feedforward_layernorm_2.weight"] = norm_w(D)
    if s.get("P"):
        P = s["P"]
        w["embed_tokens_per_layer.weight"] = (rng.standard_normal((V, L * P)) /
                                              math.sqrt(P)).astype(np.float32)
        w["per_layer_model_projection.weight"] = lin(L * P, D)
        w["per_layer_projection_norm.weight"] = norm_w(P)

    extra = {}
    if s["layout"] == "multimodal":
        extra["model.vision_tower.encoder.layers.0.self_attn.q_proj.linear.weight"] = lin(16, 16)
        extra["model.vision_tower.encoder.layers.0.self_attn.q_proj.input_min"] = \
            np.array(-3.0, dtype=np.float32)                                    # 0-d tensor
        extra["model.vision_tower.encoder.layers.0.input_layernorm.weight"] = norm_w(16)
        extra["model.embed_vision.embedding_projection.weight"] = lin(D, 16)
        if s.get("audio"):
            extra["model.audio_tower.layers.0.feed_forward1.ffw_layer_1.linear.weight"] = lin(16, 16)
            extra["model.embed_audio.embedding_projection.weight"] = lin(D, 16)
    return w, extra


def write_checkpoint(case, out_dir, dtype="f32", shards=None, layout=None, seed=0):
    """Create the checkpoint directory; returns the case spec actually used."""
    s = case_spec(case)
    if layout:
        if s["family"] == "gemma3" and layout != "gemma3":
            raise SystemExit("gemma3 cases only have the gemma3 layout")
        s["layout"] = layout
    if shards is not None:
        s["shards"] = shards
    st = {"f32": "F32", "bf16": "BF16"}[dtype]
    torch_dtype = {"f32": "float32", "bf16": "bfloat16"}[dtype]
    os.makedirs(out_dir, exist_ok=True)
    w, extra = make_weights(s, zlib.crc32(case.encode()) + 1000003 * seed)
    prefix = "model.language_model." if s["layout"] == "multimodal" else "model."
    tensors = {prefix + k: (v, st) for k, v in w.items()}
    tensors.update({k: (v, st) for k, v in extra.items()})
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(full_config(s, torch_dtype), f, indent=2)
    for stale in os.listdir(out_dir):
        if stale.endswith(".safetensors") or stale == "model.safetensors.index.json":
            os.remove(os.path.join(out_dir, stale))
    n = int(s["shards"])
    if n <= 1:
        write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors, {"format": "pt"})
    else:
        names = sorted(tensors)
        # contiguous split by cumulative size, so each shard holds a mix of layers
        sizes = [tensors[k][0].size for k in names]
        total = float(sum(sizes))
        groups = [[] for _ in range(n)]
        acc = 0
        for k, sz in zip(names, sizes):
            groups[min(n - 1, int(n * acc / total))].append(k)
            acc += sz
        wmap = {}
        total_bytes = 0
        for i, g in enumerate(groups):
            fname = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
            write_safetensors(os.path.join(out_dir, fname), {k: tensors[k] for k in g},
                              {"format": "pt"})
            for k in g:
                wmap[k] = fname
                total_bytes += tensors[k][0].size * (2 if st == "BF16" else 4)
        with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total_bytes}, "weight_map": wmap}, f, indent=2)
    return s


def main():
    ap = argparse.ArgumentParser(description="Write a random HF-layout Gemma checkpoint.")
    ap.add_argument("--case", required=True, help="one of: " + ", ".join(CASES))
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--shards", type=int, default=None, help="override the case's shard count")
    ap.add_argument("--layout", choices=["multimodal", "text", "gemma3"], default=None)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    write_checkpoint(a.case, a.out, a.dtype, a.shards, a.layout, a.seed)
    print(a.out)


if __name__ == "__main__":
    main()
