#!/usr/bin/env python3
"""Independent PyTorch reference for the Gemma 4 / Gemma 3 text decoder.

Written from /work/shared/spec/gemma4.md (section 1: architecture, 1.8: Gemma 3, section 2: HF
checkpoint format), NOT from the C++ engine.  Plain float32 (or float64) math, one full-sequence
pass with causal / sliding-window masks and no KV cache: that is what the engine's cached,
chunked and token-by-token paths are compared against.

Contents
  * a tiny safetensors reader/writer (json header + numpy; BF16 <-> float32 by bit shifts);
  * config parsing (``text_config`` if present, else top level; Gemma 4 and Gemma 3 keys);
  * weight loading (model.safetensors or a sharded index; prefixes ``model.language_model.``,
    ``language_model.model.`` or ``model.``; vision / audio towers skipped);
  * ``GemmaRef.logits(tokens)`` -> (T, V) tensor, vectorised masked-matrix attention (under
    ``torch.no_grad``; ``GemmaRef.forward(tokens)`` is the same computation with autograd on:
    every activation stays a torch tensor, so gradients flow to anything a subclass injects);
  * ``GemmaRef.linear(name, x)``: every weight-matrix projection of the forward pass
    (``x @ W.T``) goes through this one hook, named by the stripped weight name (e.g.
    ``layers.3.self_attn.q_proj.weight``); ``hf_key[name]`` is the tensor's full checkpoint key.
    train_ref.py overrides it to add LoRA;
  * ``GemmaRef.logits_stepwise(tokens)`` -> (T, V), a second, deliberately different formulation
    (token by token, explicit per-layer KV lists, per-query/per-head attention loops, pair-wise
    RoPE rotation) used only by the self-test to cross-check the first;
  * ``knobs``: named deliberate mutations (e.g. ``no_v_norm``) used by the self-test to prove
    that every feature is visible in the logits of the test cases.

Run as a script: ``gemma_ref.py CKPT_DIR 2,17,5 [--f64]`` prints logits statistics.
"""

import ctypes
import json
import math
import os
import struct
import sys

import numpy as np
import torch


def keep_large_allocations_in_heap():
    """glibc gives every allocation above its mmap threshold (32 MiB at most, by default) pages
    of its own and unmaps them on free, so each (T, 262,144) logits tensor or gradient, made
    afresh at every layer and step, costs ~25,000 page faults: measured, 5/6 of a 5-step
    `train_ref.py train` (38 s, half of it in the kernel; 6 s with this). With both thresholds
    at 2 GiB those blocks stay in the heap and are reused. The arithmetic is unchanged (same
    bytes out). Done on import: train_ref.py, check_logits.py and the helpers that build models
    import this module."""
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)  # glibc's; elsewhere, leave malloc be
    if mallopt is not None:
        M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
        mallopt(M_MMAP_THRESHOLD, 2**31 - 1)
        mallopt(M_TRIM_THRESHOLD, 2**31 - 1)


keep_large_allocations_in_heap()

# ----------------------------------------------------------------------------------------------
# safetensors
# ----------------------------------------------------------------------------------------------

_ST_TO_NP = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8,
    "U64": np.uint64, "U32": np.uint32, "U16": np.uint16, "U8": np.uint8, "BOOL": np.bool_,
}


def bf16_bits_to_f32(bits):
    """uint16 bf16 bit patterns -> float32 (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x):
    """float32 -> uint16 bf16 bit patterns, round to nearest even (NaN -> quiet NaN)."""
    x = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
    u = x.view(np.uint32).astype(np.uint64)
    rounding = ((u >> 16) & 1) + 0x7FFF
    out = ((u + rounding) >> 16).astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        out[nan] = 0x7FC0
    return out


def round_to_bf16(x):
    """Round float32 values to the nearest bf16 value, returned as float32."""
    return bf16_bits_to_f32(f32_to_bf16_bits(x))


def read_safetensors(path):
    """Returns {name: (array, st_dtype)}; BF16 tensors come back as float32 arrays."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (hlen,) = struct.unpack("<Q", data[:8])
    if 8 + hlen > len(data):
        raise ValueError(f"{path}: header length {hlen} past end of file")
    header = json.loads(data[8:8 + hlen].decode("utf-8"))
    base = 8 + hlen
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt = info["dtype"]
        shape = tuple(int(s) for s in info["shape"])
        b, e = info["data_offsets"]
        if not (0 <= b <= e <= len(data) - base):
            raise ValueError(f"{path}: tensor {name} offsets {b},{e} out of range")
        raw = data[base + b: base + e]
        n = int(np.prod(shape)) if shape else 1
        if dt == "BF16":
            if len(raw) != 2 * n:
                raise ValueError(f"{path}: {name} size mismatch")
            arr = bf16_bits_to_f32(np.frombuffer(raw, dtype="<u2")).reshape(shape)
        elif dt in _ST_TO_NP:
            npdt = np.dtype(_ST_TO_NP[dt]).newbyteorder("<")
            if len(raw) != npdt.itemsize * n:
                raise ValueError(f"{path}: {name} size mismatch")
            arr = np.frombuffer(raw, dtype=npdt).reshape(shape).copy()
        else:
            raise ValueError(f"{path}: {name}: unsupported dtype {dt}")
        out[name] = (arr, dt)
    return out


def write_safetensors(path, tensors, metadata=None):
    """tensors: {name: (array, st_dtype)} with st_dtype in F32, BF16, F16, F64, I64, I32, ...

    BF16 tensors are given as float32 arrays and rounded to nearest even.  Tensors are written in
    sorted name order, the JSON header padded with spaces to a multiple of 8 bytes.
    """
    header = {}
    blobs = []
    off = 0
    for name in sorted(tensors):
        arr, dt = tensors[name]
        arr = np.asarray(arr)
        if dt == "BF16":
            raw = f32_to_bf16_bits(arr.astype(np.float32)).astype("<u2").tobytes()
        else:
            raw = np.ascontiguousarray(arr.astype(np.dtype(_ST_TO_NP[dt]).newbyteorder("<"))).tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * ((8 - len(hjson) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for raw in blobs:
            f.write(raw)


def read_checkpoint_tensors(ckpt_dir):
    """All tensors of model.safetensors, or of the shards named by model.safetensors.index.json."""
    single = os.path.join(ckpt_dir, "model.safetensors")
    index = os.path.join(ckpt_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            wmap = json.load(f)["weight_map"]
        out = {}
        for fname in sorted(set(wmap.values())):
            part = read_safetensors(os.path.join(ckpt_dir, fname))
            for k, v in part.items():
                if k in out:
                    raise ValueError(f"tensor {k} appears in two shards")
                if wmap.get(k) != fname:
                    raise ValueError(f"tensor {k} found in {fname} but index says {wmap.get(k)}")
                out[k] = v
        missing = set(wmap) - set(out)
        if missing:
            raise ValueError(f"index names tensors not found in shards: {sorted(missing)[:5]}")
        return out
    if os.path.exists(single):
        return read_safetensors(single)
    raise FileNotFoundError(f"{ckpt_dir}: neither model.safetensors nor model.safetensors.index.json")


# ----------------------------------------------------------------------------------------------
# config
# ----------------------------------------------------------------------------------------------

SLIDING = "sliding_attention"
FULL = "full_attention"

# Prefixes in the order they are tried; after stripping, a text tensor starts with a TEXT_ROOT.
TEXT_PREFIXES = ("model.language_model.", "language_model.model.", "model.")
TEXT_ROOTS = ("embed_tokens.", "layers.", "norm.", "embed_tokens_per_layer.",
              "per_layer_model_projection.", "per_layer_projection_norm.")
LM_HEAD_KEYS = ("lm_head.weight", "language_model.lm_head.weight", "model.lm_head.weight")


class Config:
    """Text-decoder hyper-parameters, parsed from config.json per spec sections 1.5-1.8 and 2.1."""

    def __init__(self, ckpt_dir):
        with open(os.path.join(ckpt_dir, "config.json")) as f:
            top = json.load(f)
        c = top.get("text_config") if isinstance(top.get("text_config"), dict) else top
        self.raw = c
        self.top = top
        arch = (top.get("architectures") or [""])[0]
        mt = c.get("model_type") or top.get("model_type") or ""
        self.family = "gemma3" if (mt.startswith("gemma3") or arch.startswith("Gemma3")) else "gemma4"
        g = c.get
        self.vocab = int(g("vocab_size"))
        self.D = int(g("hidden_size"))
        self.F = int(g("intermediate_size"))
        self.L = int(g("num_hidden_layers"))
        self.N = int(g("num_attention_heads"))
        self.K = int(g("num_key_value_heads"))
        self.H = int(g("head_dim") or self.D // self.N)
        self.eps = float(g("rms_norm_eps", 1e-6))
        self.window = g("sliding_window")
        self.window = int(self.window) if self.window else None
        self.act = g("hidden_activation") or g("hidden_act") or "gelu_pytorch_tanh"
        if self.act not in ("gelu_pytorch_tanh", "gelu_new", "gelu_fast", "gelu"):
            raise ValueError(f"unsupported hidden_activation {self.act}")
        self.tie = bool(g("tie_word_embeddings", top.get("tie_word_embeddings", True)))
        self.final_softcap = g("final_logit_softcapping")
        self.attn_softcap = g("attn_logit_softcapping")

        types = g("layer_types")
        if types is None:
            if self.family == "gemma3":
                pat = int(g("sliding_window_pattern", 6))
                types = [SLIDING if (i + 1) % pat else FULL for i in range(self.L)]
            else:
                types = [SLIDING if (i + 1) % 6 else FULL for i in range(self.L)]
                types[-1] = FULL
        if len(types) != self.L or any(t not in (SLIDING, FULL) for t in types):
            raise ValueError(f"bad layer_types {types}")
        self.layer_types = list(types)

        rp = g("rope_parameters") or {}
        per_type = isinstance(rp, dict) and (SLIDING in rp or FULL in rp)
        if self.family == "gemma4":
            hg = c["global_head_dim"] if "global_head_dim" in c else 512
            self.HG = int(hg) if hg else self.H
            self.k_eq_v = bool(g("attention_k_eq_v", False))
            kg = g("num_global_key_value_heads")
            self.KG = int(kg) if (self.k_eq_v and kg) else self.K
            if per_type:
                self.rope = {t: dict(rp[t]) for t in (SLIDING, FULL) if t in rp}
            else:
                self.rope = {SLIDING: {"rope_type": "default",
                                       "rope_theta": float(g("rope_local_base_freq", 10000.0))},
                             FULL: {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                    "rope_theta": float(g("rope_theta", 1000000.0))}}
            self.query_pre_attn_scalar = None
            self.P = int(g("hidden_size_per_layer_input") or 0)
            self.vocab_ple = int(g("vocab_size_per_layer_input") or self.vocab)
            self.S = int(g("num_kv_shared_layers") or 0)
            self.double_wide = bool(g("use_double_wide_mlp", False))
            self.moe = bool(g("enable_moe_block", False))
            self.E = int(g("num_experts") or 0)
            self.topk = int(g("top_k_experts") or 0)
            self.Fe = int(g("moe_intermediate_size") or 0)
            if self.moe and not (self.E and self.topk and self.Fe):
                raise ValueError("enable_moe_block needs num_experts, top_k_experts, moe_intermediate_size")
        else:
            self.HG = self.H
            self.k_eq_v = False
            self.KG = self.K
            if per_type:
                self.rope = {t: dict(rp[t]) for t in (SLIDING, FULL) if t in rp}
            else:
                full = {"rope_type": "default", "rope_theta": float(g("rope_theta", 1000000.0))}
                rs = g("rope_scaling")
                if rs:
                    rtype = rs.get("rope_type", rs.get("type"))
                    if rtype != "linear":
                        raise ValueError(f"unsupported Gemma 3 rope_scaling {rs}")
                    full = {"rope_type": "linear", "factor": float(rs["factor"]),
                            "rope_theta": full["rope_theta"]}
                self.rope = {SLIDING: {"rope_type": "default",
                                       "rope_theta": float(g("rope_local_base_freq", 10000.0))},
                             FULL: full}
            self.query_pre_attn_scalar = float(g("query_pre_attn_scalar", 256))
            self.P = 0
            self.vocab_ple = 0
            self.S = 0
            self.double_wide = False
            self.moe = False
            self.E = self.topk = self.Fe = 0
        if self.final_softcap is not None:
            self.final_softcap = float(self.final_softcap)
        if self.attn_softcap is not None:
            self.attn_softcap = float(self.attn_softcap)

        # Per-layer attention shapes.  transformers >= 5.15 writes per_layer_config (layer index ->
        # overrides) instead of global_head_dim / num_global_key_value_heads; with it, a layer that
        # has no entry uses head_dim / num_key_value_heads whatever its type, and the global keys
        # are ignored.  Without it, full layers take the global keys (released checkpoints).
        plc = g("per_layer_config")
        if plc is not None:
            self.layer_H = [self.H] * self.L
            self.layer_K = [self.K] * self.L
            for key, ov in plc.items():
                l = int(key)
                if not 0 <= l < self.L:
                    raise ValueError(f"per_layer_config layer {key} out of range")
                for name, val in ov.items():
                    if name == "head_dim":
                        self.layer_H[l] = int(val)
                    elif name == "num_key_value_heads":
                        self.layer_K[l] = int(val)
                    elif c.get(name) != val:
                        raise ValueError(f"per_layer_config layer {l}: unsupported override {name}")
        else:
            self.layer_H = [self.HG if t == FULL else self.H for t in self.layer_types]
            self.layer_K = [self.KG if (t == FULL and self.k_eq_v) else self.K for t in self.layer_types]

        # KV sharing (spec 1.6): the last S layers reuse the KV of the last non-shared layer of the
        # same type.
        self.first_shared = self.L - self.S if self.S > 0 else self.L
        self.kv_source = list(range(self.L))
        for l in range(self.first_shared, self.L):
            t = self.layer_types[l]
            src = [i for i in range(self.first_shared) if self.layer_types[i] == t]
            if not src:
                raise ValueError(f"KV-shared layer {l} ({t}) has no non-shared layer of its type")
            self.kv_source[l] = src[-1]

    # per-layer geometry -------------------------------------------------------------------
    def is_shared(self, l):
        return l >= self.first_shared

    def head_dim(self, l):
        return self.layer_H[l]

    def kv_heads(self, l):
        return self.layer_K[l]

    def layer_k_eq_v(self, l):
        return self.k_eq_v and self.layer_types[l] == FULL

    def mlp_width(self, l):
        return self.F * (2 if (self.double_wide and self.is_shared(l) and self.first_shared > 0) else 1)


def rope_inv_freq(rope, head_dim, knobs=()):
    """inv_freq of length head_dim/2 (float64) for one layer type (spec 1.4).

    default:      theta^(-2i/H) for all i < H/2
    proportional: theta^(-2i/H) for i < int(partial*H//2), 0 beyond (identity rotation)
    linear:       default / factor
    """
    rtype = rope.get("rope_type", "default")
    theta = float(rope["rope_theta"])
    half = head_dim // 2
    if rtype == "proportional":
        angles = int(float(rope.get("partial_rotary_factor", 1.0)) * head_dim // 2)
        if "rope_full_rotation" in knobs:
            angles = half
    elif rtype in ("default", "linear"):
        angles = half
    else:
        raise ValueError(f"unsupported rope_type {rtype}")
    denom = head_dim
    if "rope_partial_rotated_denominator" in knobs and rtype == "proportional":
        denom = 2 * angles
    inv = np.zeros(half, dtype=np.float64)
    i = np.arange(angles, dtype=np.float64)
    inv[:angles] = 1.0 / theta ** (2.0 * i / denom)
    factor = float(rope.get("factor", 1.0) or 1.0)
    return inv / factor


# ----------------------------------------------------------------------------------------------
# the model
# ----------------------------------------------------------------------------------------------

# Deliberate mutations the self-test applies to show each feature reaches the logits.
KNOWN_KNOBS = {
    "flip_norm_offset",            # gemma4: x*(1+w); gemma3: x*w
    "attn_scale_inv_sqrt_hd",      # scores * H^-0.5 instead of the family's scale
    "attn_scale_one",              # scores * 1.0 (gemma3)
    "no_v_norm",                   # gemma4 without the weightless V norm
    "add_v_norm",                  # gemma3 with a weightless V norm
    "no_qk_norm",                  # skip q_norm / k_norm
    "no_layer_scalar",
    "no_final_softcap",
    "softcap_30",                  # hard-coded 30 instead of the configured value
    "rope_full_rotation",          # proportional layers rotate all pairs
    "rope_partial_rotated_denominator",  # exponent denominator = rotated width
    "rope_interleaved",            # GPT-J (2i, 2i+1) pairs instead of NeoX (i, i+H/2)
    "rope_swap_theta",             # sliding/full RoPE parameters swapped
    "no_sliding_window",           # sliding layers attend causally to everything
    "window_off_by_one",           # visible iff q-k <= window
    "gqa_modulo",                  # query head n uses kv head n % K
    "v_after_knorm",               # k_eq_v: V = k_norm(raw) instead of raw
    "v_after_rope",                # k_eq_v: V = rope(k_norm(raw))
    "v_from_k",                    # ignore v_proj and use the K projection as V
    "gelu_exact",
    "embed_no_scale",
    "embed_scale_unrounded",       # exact sqrt(D) even for bf16 weights
    "kvshare_off",                 # shared layers use their own (stale) k/v weights
    "kvshare_first_of_type",       # share from the first (not last) layer of the type
    "double_wide_truncate",        # shared layers use only F of their 2F MLP columns
    "ple_off", "ple_no_token", "ple_no_ctx",
    "moe_off", "moe_no_renorm", "moe_no_expert_scale", "moe_router_no_scale",
    "moe_router_from_mlp_input", "moe_experts_from_mlp_input",
}


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))


def gelu_erf(x):
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


class GemmaRef:
    def __init__(self, ckpt_dir, dtype=torch.float32, knobs=()):
        self.cfg = Config(ckpt_dir)
        self.dtype = dtype
        self.knobs = frozenset(knobs)
        unknown = self.knobs - KNOWN_KNOBS
        if unknown:
            raise ValueError(f"unknown knobs {sorted(unknown)}")
        raw = read_checkpoint_tensors(ckpt_dir)
        self.w = {}
        self.st_dtype = {}
        self.hf_key = {}          # stripped text-tensor name -> key in the checkpoint
        self.skipped = []
        self.lm_head = None
        for key, (arr, dt) in raw.items():
            if key in LM_HEAD_KEYS:
                self.lm_head = torch.from_numpy(np.asarray(arr, dtype=np.float64)).to(dtype)
                continue
            name = None
            for p in TEXT_PREFIXES:
                if key.startswith(p) and key[len(p):].startswith(TEXT_ROOTS):
                    name = key[len(p):]
                    break
            if name is None:
                self.skipped.append(key)
                continue
            if name in self.w:
                raise ValueError(f"duplicate text tensor {name}")
            self.w[name] = torch.from_numpy(np.asarray(arr, dtype=np.float64)).to(dtype)
            self.st_dtype[name] = dt
            self.hf_key[name] = key
        c = self.cfg
        self.weight_dtype = self.st_dtype["embed_tokens.weight"]
        self.embed_scale = self._dtype_round(math.sqrt(c.D))
        self.ple_scale = self._dtype_round(math.sqrt(c.P)) if c.P else 0.0
        self._check_shapes()

    # helpers ------------------------------------------------------------------------------
    def _dtype_round(self, v):
        """A python scalar rounded the way HF rounds embed_scale: to the embedding weight dtype."""
        if self.weight_dtype == "BF16" and "embed_scale_unrounded" not in self.knobs:
            return float(round_to_bf16(np.float32(v)))
        if self.weight_dtype == "F16":
            return float(np.float16(v))
        return float(np.float32(v))

    def W(self, name):
        if name not in self.w:
            raise KeyError(f"missing tensor {name}")
        return self.w[name]

    def linear(self, name, x):
        """x @ W.T for the weight matrix ``name``: the single hook for every projection."""
        return self.product(x, self.W(name))

    def product(self, x, w):
        """x @ w.T against a weight matrix (projections, MoE experts, the tied head)."""
        return x @ w.T

    def lookup(self, name, tok):
        """Rows ``tok`` of the embedding table ``name``: the hook for both embeddings."""
        return self.W(name)[tok]

    def expected_shapes(self):
        """{stripped name: shape} of every text tensor the forward pass reads (spec 2.2)."""
        c = self.cfg
        exp = {"embed_tokens.weight": (c.vocab, c.D), "norm.weight": (c.D,)}
        for l in range(c.L):
            p = f"layers.{l}."
            H, K = c.head_dim(l), c.kv_heads(l)
            exp[p + "input_layernorm.weight"] = (c.D,)
            exp[p + "post_attention_layernorm.weight"] = (c.D,)
            exp[p + "pre_feedforward_layernorm.weight"] = (c.D,)
            exp[p + "post_feedforward_layernorm.weight"] = (c.D,)
            exp[p + "self_attn.q_proj.weight"] = (c.N * H, c.D)
            exp[p + "self_attn.o_proj.weight"] = (c.D, c.N * H)
            exp[p + "self_attn.q_norm.weight"] = (H,)
            if not c.is_shared(l):
                exp[p + "self_attn.k_proj.weight"] = (K * H, c.D)
                exp[p + "self_attn.k_norm.weight"] = (H,)
                if not c.layer_k_eq_v(l):
                    exp[p + "self_attn.v_proj.weight"] = (K * H, c.D)
            Fl = c.mlp_width(l)
            exp[p + "mlp.gate_proj.weight"] = (Fl, c.D)
            exp[p + "mlp.up_proj.weight"] = (Fl, c.D)
            exp[p + "mlp.down_proj.weight"] = (c.D, Fl)
            if c.family == "gemma4":
                exp[p + "layer_scalar"] = (1,)
            if c.P:
                exp[p + "per_layer_input_gate.weight"] = (c.P, c.D)
                exp[p + "per_layer_projection.weight"] = (c.D, c.P)
                exp[p + "post_per_layer_input_norm.weight"] = (c.D,)
            if c.moe:
                exp[p + "router.proj.weight"] = (c.E, c.D)
                exp[p + "router.scale"] = (c.D,)
                exp[p + "router.per_expert_scale"] = (c.E,)
                exp[p + "experts.gate_up_proj"] = (c.E, 2 * c.Fe, c.D)
                exp[p + "experts.down_proj"] = (c.E, c.D, c.Fe)
                for n in ("pre_feedforward_layernorm_2", "post_feedforward_layernorm_1",
                          "post_feedforward_layernorm_2"):
                    exp[p + n + ".weight"] = (c.D,)
        if c.P:
            exp["embed_tokens_per_layer.weight"] = (c.vocab_ple, c.L * c.P)
            exp["per_layer_model_projection.weight"] = (c.L * c.P, c.D)
            exp["per_layer_projection_norm.weight"] = (c.P,)
        return exp

    def _check_shapes(self):
        c = self.cfg
        for k, s in self.expected_shapes().items():
            if k not in self.w:
                raise KeyError(f"checkpoint lacks {k}")
            if tuple(self.w[k].shape) != s:
                raise ValueError(f"{k}: shape {tuple(self.w[k].shape)}, expected {s}")
        if not c.tie and self.lm_head is None:
            raise KeyError("tie_word_embeddings is false but there is no lm_head.weight")

    def norm(self, x, w=None):
        """RMSNorm over the last dim, eps from config; gemma4: x*w, gemma3: x*(1+w)."""
        ms = x.pow(2).mean(-1, keepdim=True) + self.cfg.eps
        y = x * ms.pow(-0.5)
        if w is None:
            return y
        plus_one = (self.cfg.family == "gemma3") != ("flip_norm_offset" in self.knobs)
        return y * ((1.0 + w) if plus_one else w)

    def act(self, x):
        if "gelu_exact" in self.knobs or self.cfg.act == "gelu":
            return gelu_erf(x)
        return gelu_tanh(x)

    def rope_for(self, l):
        t = self.cfg.layer_types[l]
        if "rope_swap_theta" in self.knobs:
            t = FULL if t == SLIDING else SLIDING
            r = dict(self.cfg.rope[t])
            r.pop("partial_rotary_factor", None)
            if r.get("rope_type", "default") == "proportional":
                r["rope_type"] = "default"
            return r
        return self.cfg.rope[t]

    def cos_sin(self, l, T):
        H = self.cfg.head_dim(l)
        inv = rope_inv_freq(self.rope_for(l), H, self.knobs)
        ang = np.arange(T, dtype=np.float64)[:, None] * inv[None, :]          # (T, H/2)
        cos = torch.from_numpy(np.cos(ang)).to(self.dtype)
        sin = torch.from_numpy(np.sin(ang)).to(self.dtype)
        return cos, sin

    def apply_rope(self, x, cos, sin):
        """x: (T, heads, H). NeoX rotate-half: pairs (i, i+H/2)."""
        if "rope_interleaved" in self.knobs:
            x1, x2 = x[..., 0::2], x[..., 1::2]
            c, s = cos[:, None, :], sin[:, None, :]
            out = torch.empty_like(x)
            out[..., 0::2] = x1 * c - x2 * s
            out[..., 1::2] = x2 * c + x1 * s
            return out
        c = torch.cat([cos, cos], -1)[:, None, :]
        s = torch.cat([sin, sin], -1)[:, None, :]
        half = x.shape[-1] // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * c + rot * s

    def attn_scale(self, l):
        c = self.cfg
        if "attn_scale_inv_sqrt_hd" in self.knobs:
            return c.head_dim(l) ** -0.5
        if "attn_scale_one" in self.knobs:
            return 1.0
        if c.family == "gemma3":
            return c.query_pre_attn_scalar ** -0.5
        return 1.0

    def mask(self, l, T):
        """(T, T) bool, True = visible; row = query position, column = key position."""
        q = torch.arange(T)[:, None]
        k = torch.arange(T)[None, :]
        vis = k <= q
        if self.cfg.layer_types[l] == SLIDING and self.cfg.window and "no_sliding_window" not in self.knobs:
            if "window_off_by_one" in self.knobs:
                vis = vis & (q - k <= self.cfg.window)
            else:
                vis = vis & (q - k < self.cfg.window)
        return vis

    def project_kv(self, l, a, cos, sin):
        """K (after k_norm + RoPE) and V (after the weightless v-norm on gemma4) of layer l."""
        c = self.cfg
        p = f"layers.{l}.self_attn."
        T = a.shape[0]
        H, K = c.head_dim(l), c.kv_heads(l)
        raw_k = self.linear(p + "k_proj.weight", a).view(T, K, H)
        if c.layer_k_eq_v(l) or "v_from_k" in self.knobs:
            raw_v = raw_k
        else:
            raw_v = self.linear(p + "v_proj.weight", a).view(T, K, H)
        k = raw_k if "no_qk_norm" in self.knobs else self.norm(raw_k, self.W(p + "k_norm.weight"))
        k = self.apply_rope(k, cos, sin)
        if c.layer_k_eq_v(l) and "v_after_knorm" in self.knobs:
            raw_v = self.norm(raw_k, self.W(p + "k_norm.weight"))
        if c.layer_k_eq_v(l) and "v_after_rope" in self.knobs:
            raw_v = k
        v = raw_v
        if (c.family == "gemma4" and "no_v_norm" not in self.knobs) or \
           (c.family == "gemma3" and "add_v_norm" in self.knobs):
            v = self.norm(raw_v)
        return k, v

    def mlp(self, l, x):
        p = f"layers.{l}.mlp."
        g, u, d = self.W(p + "gate_proj.weight"), self.W(p + "up_proj.weight"), self.W(p + "down_proj.weight")
        if "double_wide_truncate" in self.knobs and g.shape[0] != self.cfg.F:
            g, u, d = g[:self.cfg.F], u[:self.cfg.F], d[:, :self.cfg.F]
            return (self.act(x @ g.T) * (x @ u.T)) @ d.T
        return self.linear(p + "down_proj.weight",
                           self.act(self.linear(p + "gate_proj.weight", x)) *
                           self.linear(p + "up_proj.weight", x))

    def route(self, l, h):
        """Router (spec 1.6 / HF Gemma4TextRouter): returns (top-k weights, top-k indices, probs)."""
        c = self.cfg
        p = f"layers.{l}.router."
        r = self.norm(h)
        if "moe_router_no_scale" not in self.knobs:
            r = r * self.W(p + "scale")
        r = r * (c.D ** -0.5)
        probs = torch.softmax(self.linear(p + "proj.weight", r), dim=-1)
        topw, topi = torch.topk(probs, c.topk, dim=-1)
        if "moe_no_renorm" not in self.knobs:
            topw = topw / topw.sum(-1, keepdim=True)
        if "moe_no_expert_scale" not in self.knobs:
            topw = topw * self.W(p + "per_expert_scale")[topi]
        return topw, topi, probs

    def experts(self, l, x, topw, topi):
        c = self.cfg
        gu = self.W(f"layers.{l}.experts.gate_up_proj")
        dn = self.W(f"layers.{l}.experts.down_proj")
        out = torch.zeros_like(x)
        for e in range(c.E):
            ge = self.product(x, gu[e, :c.Fe])
            ue = self.product(x, gu[e, c.Fe:])
            ye = self.product(self.act(ge) * ue, dn[e])              # (T, D)
            we = (topw * (topi == e).to(x.dtype)).sum(-1, keepdim=True)   # (T, 1)
            out = out + we * ye
        return out

    def per_layer_inputs(self, tokens, x):
        """PLE (spec 1.6): (T, L, P)."""
        c = self.cfg
        T = len(tokens)
        tok = torch.tensor(tokens)
        tok_part = torch.zeros(T, c.L * c.P, dtype=self.dtype)
        ok = (tok >= 0) & (tok < c.vocab_ple)
        tok_part[ok] = self.lookup("embed_tokens_per_layer.weight", tok[ok]) * self.ple_scale
        tok_part = tok_part.view(T, c.L, c.P)
        ctx = self.linear("per_layer_model_projection.weight", x) * (c.D ** -0.5)
        ctx = self.norm(ctx.view(T, c.L, c.P), self.W("per_layer_projection_norm.weight"))
        if "ple_no_token" in self.knobs:
            tok_part = torch.zeros_like(tok_part)
        if "ple_no_ctx" in self.knobs:
            ctx = torch.zeros_like(ctx)
        return (ctx + tok_part) * (2.0 ** -0.5)

    def embed(self, tokens):
        c = self.cfg
        tok = torch.tensor(tokens, dtype=torch.long)
        if tok.min() < 0 or tok.max() >= c.vocab:
            raise ValueError("token id out of range")
        x = self.lookup("embed_tokens.weight", tok)
        if "embed_no_scale" not in self.knobs:
            x = x * self.embed_scale
        return x

    def head(self, h):
        c = self.cfg
        y = self.norm(h, self.W("norm.weight"))
        emb = self.W("embed_tokens.weight") if (c.tie or self.lm_head is None) else self.lm_head
        logits = self.product(y, emb)
        cap = c.final_softcap
        if "softcap_30" in self.knobs:
            cap = 30.0
        if cap and "no_final_softcap" not in self.knobs:
            logits = cap * torch.tanh(logits / cap)
        return logits

    def kv_source(self, l):
        c = self.cfg
        if not c.is_shared(l) or "kvshare_off" in self.knobs:
            return l
        if "kvshare_first_of_type" in self.knobs:
            return [i for i in range(c.first_shared) if c.layer_types[i] == c.layer_types[l]][0]
        return c.kv_source[l]

    # forward --------------------------------------------------------------------------------
    @torch.no_grad()
    def logits(self, tokens, return_aux=False):
        """(T, V) logits for the whole sequence in one pass (causal masks, no cache)."""
        return self.forward(tokens, return_aux)

    def forward(self, tokens, return_aux=False):
        """``logits`` with autograd enabled (differentiable w.r.t. whatever ``linear`` adds)."""
        c = self.cfg
        T = len(tokens)
        x = self.embed(tokens)
        ple = self.per_layer_inputs(tokens, x) if (c.P and "ple_off" not in self.knobs) else None
        h = x
        kv = {}
        aux = {"router_margin": float("inf")}
        for l in range(c.L):
            p = f"layers.{l}."
            H, N = c.head_dim(l), c.N
            cos, sin = self.cos_sin(l, T)
            a = self.norm(h, self.W(p + "input_layernorm.weight"))
            q = self.linear(p + "self_attn.q_proj.weight", a).view(T, N, H)
            if "no_qk_norm" not in self.knobs:
                q = self.norm(q, self.W(p + "self_attn.q_norm.weight"))
            q = self.apply_rope(q, cos, sin)
            src = self.kv_source(l)
            if src == l:
                kv[l] = self.project_kv(l, a, cos, sin)
            k, v = kv[src]
            K = k.shape[1]
            g = N // K
            if "gqa_modulo" in self.knobs:
                kh, vh = k.repeat(1, g, 1), v.repeat(1, g, 1)
            else:
                kh, vh = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
            scores = torch.einsum("qnh,knh->nqk", q, kh) * self.attn_scale(l)
            if c.attn_softcap:
                scores = c.attn_softcap * torch.tanh(scores / c.attn_softcap)
            scores = scores.masked_fill(~self.mask(l, T)[None], float("-inf"))
            prob = torch.softmax(scores, dim=-1)
            o = torch.einsum("nqk,knh->qnh", prob, vh).reshape(T, N * H)
            o = self.linear(p + "self_attn.o_proj.weight", o)
            h = h + self.norm(o, self.W(p + "post_attention_layernorm.weight"))

            m_in = self.norm(h, self.W(p + "pre_feedforward_layernorm.weight"))
            m = self.mlp(l, m_in)
            if c.moe and "moe_off" not in self.knobs:
                m1 = self.norm(m, self.W(p + "post_feedforward_layernorm_1.weight"))
                router_in = m_in if "moe_router_from_mlp_input" in self.knobs else h
                topw, topi, probs = self.route(l, router_in)
                srt = torch.sort(probs, dim=-1, descending=True).values
                aux["router_margin"] = min(aux["router_margin"],
                                           float((srt[:, c.topk - 1] - srt[:, c.topk]).min()))
                x2 = m_in if "moe_experts_from_mlp_input" in self.knobs else \
                    self.norm(h, self.W(p + "pre_feedforward_layernorm_2.weight"))
                m2 = self.norm(self.experts(l, x2, topw, topi),
                               self.W(p + "post_feedforward_layernorm_2.weight"))
                m = m1 + m2
            h = h + self.norm(m, self.W(p + "post_feedforward_layernorm.weight"))
            if ple is not None:
                gt = self.act(self.linear(p + "per_layer_input_gate.weight", h)) * ple[:, l, :]
                h = h + self.norm(self.linear(p + "per_layer_projection.weight", gt),
                                  self.W(p + "post_per_layer_input_norm.weight"))
            if c.family == "gemma4" and "no_layer_scalar" not in self.knobs:
                h = h * self.W(p + "layer_scalar")
        out = self.head(h)
        return (out, aux) if return_aux else out

    # second formulation (self-test only) ---------------------------------------------------
    @torch.no_grad()
    def logits_stepwise(self, tokens):
        """Token-by-token decode with explicit per-layer KV lists and per-query/per-head loops.

        Independent of ``logits``' masking (explicit visible-key lists by position), RoPE (pair-wise
        rotation with angles computed per position from the spec formula) and GQA mapping (explicit
        n // (N/K) per head).  Shares only the checkpoint loader, the norm and the MLP.  Knobs are
        ignored.
        """
        if self.knobs:
            raise ValueError("logits_stepwise ignores knobs; build an un-mutated model")
        c = self.cfg
        W = self.W
        cache = {l: {"pos": [], "k": [], "v": []} for l in range(c.L)}

        def inv_freq_direct(l):
            t = c.layer_types[l]
            r = c.rope[t]
            H = c.head_dim(l)
            theta = float(r["rope_theta"])
            if r.get("rope_type") == "proportional":
                n_rot = int(float(r["partial_rotary_factor"]) * H // 2)
            else:
                n_rot = H // 2
            fac = float(r.get("factor", 1.0) or 1.0)
            return [(theta ** (-(2.0 * i) / H)) / fac if i < n_rot else 0.0 for i in range(H // 2)]

        freqs = {l: inv_freq_direct(l) for l in range(c.L)}

        def rotate(vec, pos, fr):
            H = vec.shape[-1]
            half = H // 2
            out = vec.clone()
            for i in range(half):
                cs, sn = math.cos(pos * fr[i]), math.sin(pos * fr[i])
                a_, b_ = vec[..., i].clone(), vec[..., i + half].clone()
                out[..., i] = a_ * cs - b_ * sn
                out[..., i + half] = b_ * cs + a_ * sn
            return out

        # kv source computed independently from the config: scan backwards
        def source(l):
            if l < c.L - c.S:
                return l
            for j in range(c.L - c.S - 1, -1, -1):
                if c.layer_types[j] == c.layer_types[l]:
                    return j
            raise ValueError("no kv source")

        rows = []
        for pos, tok in enumerate(tokens):
            x = W("embed_tokens.weight")[tok] * self.embed_scale            # (D,)
            ple = None
            if c.P:
                tp = (W("embed_tokens_per_layer.weight")[tok] * self.ple_scale
                      if tok < c.vocab_ple else torch.zeros(c.L * c.P, dtype=self.dtype))
                cp = (W("per_layer_model_projection.weight") @ x) / math.sqrt(c.D)
                cp = torch.stack([self.norm(cp[j * c.P:(j + 1) * c.P], W("per_layer_projection_norm.weight"))
                                  for j in range(c.L)])
                ple = (cp + tp.view(c.L, c.P)) / math.sqrt(2.0)
            h = x
            for l in range(c.L):
                p = f"layers.{l}."
                H, N = c.head_dim(l), c.N
                a = self.norm(h, W(p + "input_layernorm.weight"))
                q = (W(p + "self_attn.q_proj.weight") @ a).view(N, H)
                q = rotate(self.norm(q, W(p + "self_attn.q_norm.weight")), pos, freqs[l])
                if source(l) == l:
                    Kl = c.kv_heads(l)
                    rk = (W(p + "self_attn.k_proj.weight") @ a).view(Kl, H)
                    rv = rk if c.layer_k_eq_v(l) else (W(p + "self_attn.v_proj.weight") @ a).view(Kl, H)
                    kk = rotate(self.norm(rk, W(p + "self_attn.k_norm.weight")), pos, freqs[l])
                    vv = self.norm(rv) if c.family == "gemma4" else rv
                    cache[l]["pos"].append(pos)
                    cache[l]["k"].append(kk)
                    cache[l]["v"].append(vv)
                src = cache[source(l)]
                Kl = src["k"][0].shape[0]
                if c.family == "gemma3":
                    scale = 1.0 / math.sqrt(c.query_pre_attn_scalar)
                else:
                    scale = 1.0
                heads = []
                for n in range(N):
                    kvh = n // (N // Kl)
                    vis = [j for j, kp in enumerate(src["pos"])
                           if kp <= pos and (c.layer_types[l] != SLIDING or not c.window
                                             or pos - kp < c.window)]
                    s = torch.stack([torch.dot(q[n], src["k"][j][kvh]) for j in vis]) * scale
                    if c.attn_softcap:
                        s = c.attn_softcap * torch.tanh(s / c.attn_softcap)
                    s = torch.exp(s - s.max())
                    s = s / s.sum()
                    o = sum(s[i] * src["v"][j][kvh] for i, j in enumerate(vis))
                    heads.append(o)
                o = W(p + "self_attn.o_proj.weight") @ torch.cat(heads)
                h = h + self.norm(o, W(p + "post_attention_layernorm.weight"))
                m_in = self.norm(h, W(p + "pre_feedforward_layernorm.weight"))
                m = self.mlp(l, m_in[None])[0]
                if c.moe:
                    m1 = self.norm(m, W(p + "post_feedforward_layernorm_1.weight"))
                    r = self.norm(h) * W(p + "router.scale") / math.sqrt(c.D)
                    logit = W(p + "router.proj.weight") @ r
                    pr = torch.exp(logit - logit.max())
                    pr = pr / pr.sum()
                    order = sorted(range(c.E), key=lambda e: -float(pr[e]))[:c.topk]
                    tot = sum(float(pr[e]) for e in order)
                    x2 = self.norm(h, W(p + "pre_feedforward_layernorm_2.weight"))
                    gu, dn = W(p + "experts.gate_up_proj"), W(p + "experts.down_proj")
                    acc = torch.zeros_like(h)
                    for e in order:
                        wgt = float(pr[e]) / tot * float(W(p + "router.per_expert_scale")[e])
                        ge, ue = gu[e][:c.Fe] @ x2, gu[e][c.Fe:] @ x2
                        acc = acc + wgt * (dn[e] @ (self.act(ge) * ue))
                    m = m1 + self.norm(acc, W(p + "post_feedforward_layernorm_2.weight"))
                h = h + self.norm(m, W(p + "post_feedforward_layernorm.weight"))
                if ple is not None:
                    gt = self.act(W(p + "per_layer_input_gate.weight") @ h) * ple[l]
                    h = h + self.norm(W(p + "per_layer_projection.weight") @ gt,
                                      W(p + "post_per_layer_input_norm.weight"))
                if c.family == "gemma4":
                    h = h * W(p + "layer_scalar")[0]
            rows.append(self.head(h[None])[0])
        return torch.stack(rows)


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ckpt")
    ap.add_argument("tokens", help="comma-separated ids")
    ap.add_argument("--f64", action="store_true")
    ap.add_argument("--out", help="write logits as float32 .npy")
    a = ap.parse_args(argv)
    m = GemmaRef(a.ckpt, torch.float64 if a.f64 else torch.float32)
    toks = [int(t) for t in a.tokens.split(",")]
    lg = m.logits(toks)
    print(f"family={m.cfg.family} weights={m.weight_dtype} embed_scale={m.embed_scale} "
          f"skipped={len(m.skipped)} logits={tuple(lg.shape)} argmax={lg.argmax(-1).tolist()}")
    if a.out:
        np.save(a.out, lg.float().numpy())


if __name__ == "__main__":
    main(sys.argv[1:])
