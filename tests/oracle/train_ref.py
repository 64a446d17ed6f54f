#!/usr/bin/python3
"""Independent PyTorch oracle for gemmakit's LoRA SFT trainer (losses, gradients, AdamW replay).

Written from /work/shared/spec/gemma4.md (section 1: the decoder, section 5.1: the PEFT LoRA
format) on top of gemma_ref.py's reference forward pass, NOT from the C++ trainer or model code:
the point is an implementation that shares nothing with the engine but the spec.

LoRA (PEFT semantics, dropout 0): every projection the adapter targets computes
    y = x W^T + scaling * (x A^T) B^T,   A: (r, in), B: (out, r),
    scaling = lora_alpha / r   (lora_alpha / sqrt(r) with use_rslora).
It is injected through GemmaRef.linear, the one hook every weight-matrix projection of the
reference goes through, so on a K=V full-attention layer (no v_proj) a k_proj LoRA changes K and
V alike: V *is* the raw k_proj output there.  Base weights are frozen (bf16 checkpoints are
widened to float32 exactly); all math in float32, or float64 with --f64.

Batch file (safetensors): "tokens" I32 (n), "loss_mask" U8 (n), "offsets" I64 (rows+1).
Row i = tokens[offsets[i]:offsets[i+1]], an independent sequence (positions from 0, attends only
to itself).  loss_mask[j] = 1 marks token j as a target: the loss counts
-log softmax(logits[j-1])[tokens[j]] (logits after the final softcap); the mask of a row's
first token is ignored.  loss = sum of target NLLs / number of targets.

Subcommands
  train_ref.py grads --model CKPT --adapter ADAPTER_DIR --batch BATCH.safetensors
                     --out OUT.safetensors [--f64] [--bf16-products [--permute-sums SEED]]
      OUT: "loss" F32 (1,), "num_target_tokens" I64 (1,), and d loss / d t for every adapter
      tensor t under the adapter's own key, F32.
  train_ref.py train --model CKPT --adapter INIT_ADAPTER_DIR --batch BATCH.safetensors
                     --micro-batch M --grad-accum A --steps S --lr PEAK --warmup W --end-lr E
                     --weight-decay WD [--beta1 0.9] [--beta2 0.999] [--eps 1e-8]
                     [--max-grad-norm G] --out-dir DIR [--f64] [--bf16-products [--permute-sums SEED]]
      Optimizer step s (0-based) uses rows (s*M*A + j) mod rows, j < M*A; its loss is the mean
      over ALL target tokens of those rows (not a mean of micro-batch means); optional global
      norm clipping (factor G/norm exactly, when norm > G); torch.optim.AdamW; lr of step s =
      optax.warmup_cosine_decay_schedule(0, PEAK, W, S, E)(s).  Writes DIR/losses.json
      {"steps": [{"step": s+1, "loss", "grad_norm" (before clipping), "lr", "target_tokens"}]}
      and the final adapter DIR/adapter_model.safetensors (F32) + DIR/adapter_config.json.
      --bf16-products (a bf16 checkpoint): mixed precision as gemmakit's train.precision =
      "bf16" computes it: every product against a checkpoint matrix (not the MoE router) rounds
      its input, and its output gradient, to bf16 and accumulates in float32 (Bf16Product).
      --permute-sums SEED: those products add their terms in the order of a permutation seeded
      by SEED (SumOrder): the same math, other roundings, one more sample of the oracle's own
      spread for the bf16 tests (docs/TRAIN.md).
  train_ref.py full-grads --model CKPT --batch BATCH.safetensors --out OUT.safetensors
                          [--bf16-compute] [--f64]
  train_ref.py full-train --model CKPT --batch BATCH.safetensors (train's optimizer flags)
                          --out-dir DIR [--bf16-compute] [--f64]
      Full fine-tuning (FullGemma): every tensor the forward pass reads is trainable except
      layer_scalar (a buffer in transformers); the pad row of both embeddings gets no lookup
      gradient (padding_idx).  full-grads writes the gradient of every trainable tensor under its
      checkpoint key; full-train replays the same schedule as train and writes DIR/losses.json
      and DIR/masters.safetensors (the float32 masters).  --bf16-compute: the forward pass reads
      the masters rounded to bf16 (mixed precision over a bf16 checkpoint).
  train_ref.py --self-test
      finite differences (float64) on tiny random checkpoints, B = 0 and merge identities,
      schedule values, grads/train CLI round trips and an independent AdamW replay.

Adapter validation: every adapter module must be a projection the reference forward actually
uses (q/k/v/o, gate/up/down, PLE gate/projection, per_layer_model_projection, router.proj) and
must match target_modules; every used projection that target_modules matches must be in the
adapter; every key must be a lora_A/lora_B pair of the right shapes.  Anything else is an error.
"""

import argparse
import json
import math
import os
import re
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from gemma_ref import GemmaRef, read_safetensors, write_safetensors  # noqa: E402

PEFT_PREFIX = "base_model.model."
LORA_SUFFIXES = {".lora_A.weight": "A", ".lora_B.weight": "B"}

# adapter_config.json fields this oracle does not implement: (field, the values it accepts).
UNSUPPORTED_IF_SET = {
    "use_dora": (None, False),
    "fan_in_fan_out": (None, False),
    "bias": (None, "none"),
    "lora_bias": (None, False),
    "modules_to_save": (None, [], ()),
    "layers_to_transform": (None, [], ()),
    "layers_pattern": (None, [], (), ""),
    "rank_pattern": (None, {}),
    "alpha_pattern": (None, {}),
    "exclude_modules": (None, [], (), ""),
    "target_parameters": (None, [], ()),
}


class OracleError(Exception):
    """A problem with the inputs (adapter, batch, arguments); reported as one error line."""


# ----------------------------------------------------------------------------------------------
# adapters (PEFT, spec 5.1)
# ----------------------------------------------------------------------------------------------

class AdapterConfig:
    def __init__(self, d, where="adapter_config.json"):
        self.raw = dict(d)
        if d.get("peft_type", "LORA") != "LORA":
            raise OracleError(f"{where}: peft_type {d.get('peft_type')!r}, only LORA is supported")
        for k, ok in UNSUPPORTED_IF_SET.items():
            if k in d and d[k] not in ok:
                raise OracleError(f"{where}: {k}={d[k]!r} is not supported by the oracle")
        try:
            self.r = int(d["r"])
            self.alpha = float(d["lora_alpha"])
        except (KeyError, TypeError, ValueError) as e:
            raise OracleError(f"{where}: needs integer r and numeric lora_alpha ({e})")
        if self.r <= 0:
            raise OracleError(f"{where}: r must be positive, got {self.r}")
        self.rslora = bool(d.get("use_rslora", False))
        tm = d.get("target_modules")
        if isinstance(tm, str):
            self.target = tm
        elif isinstance(tm, (list, tuple)) and tm and all(isinstance(t, str) for t in tm):
            self.target = list(tm)
        else:
            raise OracleError(f"{where}: target_modules must be a regex string or a non-empty "
                              f"list of module-name suffixes, got {tm!r}")
        self.dropout = float(d.get("lora_dropout", 0.0) or 0.0)

    @property
    def scaling(self):
        return self.alpha / math.sqrt(self.r) if self.rslora else self.alpha / self.r

    def matches(self, module):
        """PEFT check_target_module_exists: regex string -> re.fullmatch; list -> the name
        itself or a ".suffix" of it; "all-linear" -> every projection (there is no lm_head
        module here: the head is the tied embedding)."""
        t = self.target
        if isinstance(t, str):
            if t == "all-linear":
                return True
            return re.fullmatch(t, module) is not None
        return module in t or any(module.endswith("." + s) for s in t)


def read_adapter(adapter_dir):
    """(AdapterConfig, {key: (float32 array, st dtype)}) of a PEFT adapter directory."""
    cpath = os.path.join(adapter_dir, "adapter_config.json")
    wpath = os.path.join(adapter_dir, "adapter_model.safetensors")
    for p in (cpath, wpath):
        if not os.path.exists(p):
            raise OracleError(f"{adapter_dir}: missing {os.path.basename(p)}")
    with open(cpath) as f:
        cfg = AdapterConfig(json.load(f), cpath)
    tensors = read_safetensors(wpath)
    for k, (arr, dt) in tensors.items():
        if dt not in ("F32", "BF16", "F16", "F64"):
            raise OracleError(f"{wpath}: {k} has dtype {dt}; LoRA tensors must be floating point")
    return cfg, tensors


def write_adapter(out_dir, cfg_raw, tensors):
    """tensors: {key: array}; written as F32."""
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "adapter_config.json"), "w") as f:
        json.dump(cfg_raw, f, indent=2)
    write_safetensors(os.path.join(out_dir, "adapter_model.safetensors"),
                      {k: (np.asarray(v, dtype=np.float32), "F32") for k, v in tensors.items()},
                      {"format": "pt"})


def make_adapter_config(r, alpha, target_modules, use_rslora=False):
    return {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": "",
            "r": r, "lora_alpha": alpha, "lora_dropout": 0.0, "target_modules": target_modules,
            "use_rslora": use_rslora, "use_dora": False, "bias": "none", "fan_in_fan_out": False,
            "inference_mode": False, "init_lora_weights": True, "modules_to_save": None}


# ----------------------------------------------------------------------------------------------
# the LoRA model
# ----------------------------------------------------------------------------------------------

def round_bf16(t):
    """t rounded to the nearest bf16 (ties to even), back in t's dtype."""
    return t.to(torch.bfloat16).to(t.dtype)


class SumOrder:
    """A seeded permutation of each product's reduction dimension: the same sums in another
    order (--permute-sums), one more sample of how far a change of summation order moves bf16
    results (the bf16 tests' yardstick; docs/TRAIN.md)."""

    def __init__(self, seed):
        self.seed, self.perms = seed, {}

    def __call__(self, n):
        if n not in self.perms:
            self.perms[n] = torch.randperm(n, generator=torch.Generator().manual_seed(self.seed * 1000003 + n))
        return self.perms[n]


class Bf16Product(torch.autograd.Function):
    """x @ w.T with x rounded to bf16, and its input gradient dy @ w with dy rounded to bf16; w
    frozen (bf16 values).  Products of bf16 values are exact in float32, so this is what a bf16
    GEMM with float32 accumulation and a float32 result computes (up to the order of the sums,
    which `order`, a SumOrder or None, permutes)."""

    @staticmethod
    def forward(ctx, x, w, order):
        ctx.save_for_backward(w)
        ctx.order = order
        x = round_bf16(x)
        if order is not None:
            k = order(w.shape[1])
            x, w = x[..., k], w[:, k]
        return x @ w.T

    @staticmethod
    def backward(ctx, dy):
        (w,) = ctx.saved_tensors
        dy = round_bf16(dy)
        if ctx.order is not None:
            n = ctx.order(w.shape[0])
            dy, w = dy[..., n], w[n, :]
        return dy @ w, None, None


class LoraGemma(GemmaRef):
    """GemmaRef plus LoRA on the projections an adapter names (forward: GemmaRef.forward).

    bf16_products: every product against a bf16 checkpoint matrix (projections, MoE experts,
    the tied head; not the MoE router, whose top-k a rounding could flip) rounds its input, and
    in the backward pass its output gradient, to bf16 (Bf16Product); LoRA products, attention,
    norms and everything else stay in the model dtype.  The precision of mixed-precision bf16
    training with float32 results, which gemmakit's train.precision = "bf16" computes."""

    def __init__(self, ckpt_dir, dtype=torch.float32, knobs=(), bf16_products=False, sum_order=None):
        super().__init__(ckpt_dir, dtype, knobs)
        self.sum_order = sum_order
        if bf16_products and self.weight_dtype != "BF16":
            raise OracleError(f"--bf16-products needs a bf16 checkpoint, this one is {self.weight_dtype}")
        self.bf16_products = bf16_products
        self.in_router = False
        self.lora = {}          # stripped weight name -> (A, B, scaling)
        self.params = {}        # adapter key -> leaf tensor (requires_grad)
        self.adapter_cfg = None

    def lora_modules(self):
        """{HF module path: stripped weight name} of every projection the forward pass uses.

        KV-shared layers' k/v projections are absent: those layers reuse another layer's KV,
        so a LoRA there could have no effect."""
        c = self.cfg
        names = []
        for l in range(c.L):
            p = f"layers.{l}."
            names += [p + "self_attn.q_proj.weight", p + "self_attn.o_proj.weight"]
            if not c.is_shared(l):
                names.append(p + "self_attn.k_proj.weight")
                if not c.layer_k_eq_v(l):
                    names.append(p + "self_attn.v_proj.weight")
            names += [p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight", p + "mlp.down_proj.weight"]
            if c.P:
                names += [p + "per_layer_input_gate.weight", p + "per_layer_projection.weight"]
            if c.moe:
                names.append(p + "router.proj.weight")
        if c.P:
            names.append("per_layer_model_projection.weight")
        out = {}
        for n in names:
            key = self.hf_key[n]
            assert key.endswith(".weight")
            out[key[:-len(".weight")]] = n
        return out

    def attach(self, cfg, tensors, requires_grad=True):
        """Validate an adapter against the model and install it.  tensors: {key: (array, dt)}."""
        modules = self.lora_modules()
        by_module = {}
        for key in tensors:
            suf = next((s for s in LORA_SUFFIXES if key.endswith(s)), None)
            if not key.startswith(PEFT_PREFIX) or suf is None:
                raise OracleError(f"adapter key {key!r} is not 'base_model.model.<module>"
                                  f".lora_A.weight' / '.lora_B.weight'")
            mod = key[len(PEFT_PREFIX):-len(suf)]
            by_module.setdefault(mod, {})[LORA_SUFFIXES[suf]] = key
        problems = []
        for mod in sorted(by_module):
            if mod not in modules:
                hint = ""
                stripped = mod.split("layers.", 1)[-1] if "layers." in mod else mod
                near = [m for m in modules if m.endswith(stripped)]
                if near:
                    hint = f" (the model calls it {near[0]!r})"
                elif re.search(r"\.(k|v)_proj$", mod):
                    hint = " (a K=V layer has no v_proj; KV-shared layers use no k/v projection)"
                problems.append(f"adapter module {mod!r} is not a projection of this model{hint}")
            elif not cfg.matches(mod):
                problems.append(f"adapter module {mod!r} does not match target_modules "
                                f"{cfg.target!r}")
            if set(by_module[mod]) != {"A", "B"}:
                problems.append(f"adapter module {mod!r} has only lora_{''.join(by_module[mod])}")
        for mod in sorted(modules):
            if cfg.matches(mod) and mod not in by_module:
                problems.append(f"target_modules {cfg.target!r} matches {mod!r} but the adapter "
                                f"has no tensors for it")
        if not by_module:
            problems.append("adapter has no LoRA tensors")
        if problems:
            raise OracleError("; ".join(problems))
        self.lora, self.params, self.adapter_cfg = {}, {}, cfg
        s = cfg.scaling
        for mod, ab in sorted(by_module.items()):
            wname = modules[mod]
            out_f, in_f = self.W(wname).shape
            A = torch.from_numpy(np.asarray(tensors[ab["A"]][0], dtype=np.float64)).to(self.dtype)
            B = torch.from_numpy(np.asarray(tensors[ab["B"]][0], dtype=np.float64)).to(self.dtype)
            if tuple(A.shape) != (cfg.r, in_f) or tuple(B.shape) != (out_f, cfg.r):
                raise OracleError(f"{mod}: lora_A {tuple(A.shape)} / lora_B {tuple(B.shape)}, "
                                  f"expected ({cfg.r}, {in_f}) / ({out_f}, {cfg.r}) for r={cfg.r}")
            A.requires_grad_(requires_grad)
            B.requires_grad_(requires_grad)
            self.params[ab["A"]], self.params[ab["B"]] = A, B
            self.lora[wname] = (A, B, s)

    def product(self, x, w):
        if self.bf16_products and not self.in_router:
            return Bf16Product.apply(x, w, self.sum_order)
        return x @ w.T

    def linear(self, name, x):
        self.in_router = name.endswith("router.proj.weight")
        try:
            y = self.product(x, self.W(name))
        finally:
            self.in_router = False
        ad = self.lora.get(name)
        if ad is not None:
            A, B, s = ad
            y = y + s * ((x @ A.T) @ B.T)
        return y

    def merged_weights(self):
        """{stripped weight name: W + scaling * B @ A} (detached) for every adapted projection."""
        with torch.no_grad():
            return {n: self.W(n) + s * (B @ A) for n, (A, B, s) in self.lora.items()}


class FullGemma(GemmaRef):
    """GemmaRef with every tensor the forward pass reads trainable (full fine-tuning), as
    transformers' Gemma 4 / Gemma 3 modules hold them: every nn.Linear, embedding, RMSNorm weight,
    router scale and expert stack is a Parameter; layer_scalar is a buffer (frozen).  Both
    embeddings have padding_idx = pad_token_id, so the pad row gets no gradient from a lookup
    (the tied head still gives the token embedding one).

    Masters are float32 (or float64) copies in checkpoint space.  With ``bf16_compute`` the forward
    pass reads each master rounded to bfloat16 (straight-through: the gradient of the rounded
    weight is applied to the master), which is mixed-precision training of a bf16 checkpoint.
    """

    def __init__(self, ckpt_dir, dtype=torch.float32, bf16_compute=False):
        super().__init__(ckpt_dir, dtype)
        self.bf16_compute = bf16_compute
        self.params = {}  # checkpoint key -> master (requires_grad)
        self.master = {}  # stripped name -> master
        for name in self.expected_shapes():
            if name.endswith("layer_scalar"):
                continue
            m = self.w[name].clone().requires_grad_(True)
            self.master[name] = m
            self.params[self.hf_key[name]] = m

    def W(self, name):
        m = self.master.get(name)
        if m is None:
            return super().W(name)
        if self.bf16_compute:
            return m + (m.detach().to(torch.bfloat16).to(m.dtype) - m.detach())
        return m

    def lookup(self, name, tok):
        rows = self.W(name)[tok]
        pad = (tok == self.cfg.raw.get("pad_token_id", 0))[:, None]
        return torch.where(pad, rows.detach(), rows)


def load_model(ckpt, adapter_dir, dtype, bf16_products=False, permute_sums=None):
    if permute_sums is not None and not bf16_products:
        raise OracleError("--permute-sums reorders the bf16 products' sums: it needs --bf16-products")
    m = LoraGemma(ckpt, dtype, bf16_products=bf16_products,
                  sum_order=None if permute_sums is None else SumOrder(permute_sums))
    cfg, tensors = read_adapter(adapter_dir)
    m.attach(cfg, tensors)
    return m


# ----------------------------------------------------------------------------------------------
# batches and the loss
# ----------------------------------------------------------------------------------------------

class Batch:
    def __init__(self, tokens, mask, offsets, where="batch"):
        self.tokens = np.asarray(tokens, dtype=np.int64).reshape(-1)
        self.mask = np.asarray(mask).reshape(-1).astype(np.int64)
        self.offsets = np.asarray(offsets, dtype=np.int64).reshape(-1)
        n = len(self.tokens)
        if len(self.mask) != n:
            raise OracleError(f"{where}: loss_mask has {len(self.mask)} entries, tokens {n}")
        if len(self.offsets) < 2 or self.offsets[0] != 0 or self.offsets[-1] != n or \
                np.any(np.diff(self.offsets) < 0):
            raise OracleError(f"{where}: offsets must rise from 0 to {n} (rows+1 entries), "
                              f"got {self.offsets[:8].tolist()}...")
        if np.any((self.mask != 0) & (self.mask != 1)):
            raise OracleError(f"{where}: loss_mask must be 0/1")
        self.rows = len(self.offsets) - 1

    @classmethod
    def read(cls, path):
        t = read_safetensors(path)
        for k, want in (("tokens", ("I32", "I64")), ("loss_mask", ("U8", "BOOL")), ("offsets", ("I64",))):
            if k not in t:
                raise OracleError(f"{path}: missing tensor {k!r}")
            if t[k][1] not in want:
                raise OracleError(f"{path}: {k} is {t[k][1]}, expected {want[0]}")
        return cls(t["tokens"][0], t["loss_mask"][0], t["offsets"][0], path)

    def write(self, path):
        write_safetensors(path, {"tokens": (self.tokens.astype(np.int32), "I32"),
                                 "loss_mask": (self.mask.astype(np.uint8), "U8"),
                                 "offsets": (self.offsets, "I64")})

    def row(self, i):
        b, e = self.offsets[i], self.offsets[i + 1]
        return self.tokens[b:e].tolist(), self.mask[b:e]

    def targets(self, i):
        _, m = self.row(i)
        return int(m[1:].sum())


def row_nll(model, toks, mask):
    """Sum over targets j >= 1 of -log softmax(logits[j-1])[toks[j]] (a 0-d tensor)."""
    logits = model.forward(toks)
    lp = torch.log_softmax(logits[:-1], dim=-1)
    sel = torch.from_numpy(np.asarray(mask[1:]) != 0)
    tgt = torch.tensor(toks[1:], dtype=torch.long)
    return -lp[sel, tgt[sel]].sum()


def loss_and_grads(model, batch, rows, backward=True):
    """Mean target NLL over the given rows (float), the target count, and (if backward) the
    gradients accumulated into the adapter tensors' .grad.  Rows are forwarded and backpropagated
    one at a time, each scaled by 1/targets-of-all-rows: the gradient of the whole-batch mean."""
    n = sum(batch.targets(i) for i in rows)
    if n == 0:
        raise OracleError(f"rows {rows[:4]}... hold no target tokens")
    total = 0.0
    for i in rows:
        if batch.targets(i) == 0:
            continue
        toks, mask = batch.row(i)
        if backward:
            s = row_nll(model, toks, mask)
            (s / n).backward()
        else:
            with torch.no_grad():
                s = row_nll(model, toks, mask)
        total += float(s.detach().double())
    return total / n, n


def compute_grads(model, batch, rows=None):
    """(loss, num_targets, {adapter key: grad tensor}) for the batch (default: all rows)."""
    rows = list(range(batch.rows)) if rows is None else rows
    for p in model.params.values():
        p.grad = None
    loss, n = loss_and_grads(model, batch, rows)
    grads = {k: (p.grad if p.grad is not None else torch.zeros_like(p)) for k, p in model.params.items()}
    return loss, n, grads


# ----------------------------------------------------------------------------------------------
# learning-rate schedule (optax) and the optimizer loop
# ----------------------------------------------------------------------------------------------

def warmup_cosine_decay_schedule(init_value, peak_value, warmup_steps, decay_steps,
                                 end_value=0.0, exponent=1.0):
    """Transcription of optax.warmup_cosine_decay_schedule (optax/schedules/_schedule.py):

        alpha = 0 if peak == 0 else end / peak
        join_schedules([linear_schedule(init, peak, warmup_steps),
                        cosine_decay_schedule(peak, decay_steps - warmup_steps, alpha, exponent)],
                       boundaries=[warmup_steps])
      linear (polynomial power 1): transition_steps <= 0 -> constant init; else
        c = clip(count, 0, W);  (init - peak) * (1 - c / W) + peak
      cosine: decay_steps - W must be > 0 (optax raises ValueError); c = min(count, T);
        peak * ((1 - alpha) * (0.5 * (1 + cos(pi * c / T)))**exponent + alpha)
      join: where(count < W, linear(count), cosine(count - W))
    Evaluated in float64 (optax evaluates in float32 by default: ~1e-7 relative difference).
    """
    alpha = 0.0 if peak_value == 0.0 else end_value / peak_value
    T = decay_steps - warmup_steps
    if not T > 0:
        raise OracleError(f"warmup_cosine_decay_schedule needs decay_steps ({decay_steps}) > "
                          f"warmup_steps ({warmup_steps}) (optax raises ValueError)")

    def linear(count):
        if warmup_steps <= 0:
            return float(init_value)
        c = min(max(count, 0), warmup_steps)
        frac = 1.0 - c / warmup_steps
        return (init_value - peak_value) * frac + peak_value

    def cosine(count):
        c = min(count, T)
        cd = 0.5 * (1.0 + math.cos(math.pi * c / T))
        return peak_value * ((1.0 - alpha) * cd ** exponent + alpha)

    def schedule(count):
        return linear(count) if count < warmup_steps else cosine(count - warmup_steps)

    return schedule


def global_grad_norm(tensors):
    return math.sqrt(sum(float(t.detach().double().pow(2).sum()) for t in tensors))


def clip_(grads, max_norm):
    """Global-norm clipping, clip_grad_norm_ semantics without its 1e-6: returns the pre-clip
    norm; when norm > max_norm every gradient is multiplied by exactly max_norm / norm."""
    norm = global_grad_norm(grads)
    if max_norm is not None and norm > max_norm:
        f = max_norm / norm
        for g in grads:
            g.mul_(f)
    return norm


def step_rows(s, per_step, nrows):
    return [(s * per_step + j) % nrows for j in range(per_step)]


def train(model, batch, micro_batch, grad_accum, steps, lr, warmup, end_lr, weight_decay,
          beta1=0.9, beta2=0.999, eps=1e-8, max_grad_norm=None, log=None):
    """Replays a run; returns the per-step records.  Adapter tensors are updated in place."""
    if micro_batch < 1 or grad_accum < 1 or steps < 1:
        raise OracleError("--micro-batch, --grad-accum and --steps must be >= 1")
    sched = warmup_cosine_decay_schedule(0.0, lr, warmup, steps, end_lr)
    keys = sorted(model.params)
    params = [model.params[k] for k in keys]
    opt = torch.optim.AdamW(params, lr=0.0, betas=(beta1, beta2), eps=eps,
                            weight_decay=weight_decay)
    per_step = micro_batch * grad_accum
    records = []
    for s in range(steps):
        rows = step_rows(s, per_step, batch.rows)
        for p in params:
            p.grad = torch.zeros_like(p)
        loss, n = loss_and_grads(model, batch, rows)
        norm = clip_([p.grad for p in params], max_grad_norm)
        cur = sched(s)
        for g in opt.param_groups:
            g["lr"] = cur
        opt.step()
        rec = {"step": s + 1, "loss": loss, "grad_norm": norm, "lr": cur, "target_tokens": n}
        records.append(rec)
        if log:
            log(f"step {s + 1}/{steps} loss {loss:.6f} grad_norm {norm:.6f} lr {cur:.3e} "
                f"targets {n}")
    return records


# ----------------------------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------------------------

def cmd_grads(a):
    dtype = torch.float64 if a.f64 else torch.float32
    model = load_model(a.model, a.adapter, dtype, a.bf16_products, a.permute_sums)
    batch = Batch.read(a.batch)
    loss, n, grads = compute_grads(model, batch)
    out = {"loss": (np.array([loss], dtype=np.float32), "F32"),
           "num_target_tokens": (np.array([n], dtype=np.int64), "I64")}
    for k, g in grads.items():
        out[k] = (g.detach().double().numpy().astype(np.float32), "F32")
    write_safetensors(a.out, out, {"oracle": "train_ref.py grads",
                                   "dtype": "float64" if a.f64 else "float32",
                                   "bf16_products": str(a.bf16_products)})
    print(json.dumps({"loss": loss, "num_target_tokens": n, "tensors": len(grads),
                      "scaling": model.adapter_cfg.scaling}))
    return 0


def replay(a, model):
    """Runs train() with the CLI's optimizer arguments and writes DIR/losses.json."""
    batch = Batch.read(a.batch)
    recs = train(model, batch, a.micro_batch, a.grad_accum, a.steps, a.lr, a.warmup, a.end_lr,
                 a.weight_decay, a.beta1, a.beta2, a.eps, a.max_grad_norm,
                 log=lambda msg: print(msg, file=sys.stderr))
    os.makedirs(a.out_dir, exist_ok=True)
    with open(os.path.join(a.out_dir, "losses.json"), "w") as f:
        json.dump({"steps": recs,
                   "args": {k: v for k, v in vars(a).items() if k != "func"}}, f, indent=2)
    print(json.dumps({"final_loss": recs[-1]["loss"], "steps": len(recs)}))


def cmd_train(a):
    model = load_model(a.model, a.adapter, torch.float64 if a.f64 else torch.float32, a.bf16_products,
                       a.permute_sums)
    replay(a, model)
    write_adapter(a.out_dir, model.adapter_cfg.raw,
                  {k: p.detach().double().numpy() for k, p in model.params.items()})
    return 0


def cmd_full_grads(a):
    dtype = torch.float64 if a.f64 else torch.float32
    model = FullGemma(a.model, dtype, a.bf16_compute)
    batch = Batch.read(a.batch)
    loss, n, grads = compute_grads(model, batch)
    out = {"loss": (np.array([loss], dtype=np.float32), "F32"),
           "num_target_tokens": (np.array([n], dtype=np.int64), "I64")}
    for k, g in grads.items():
        out[k] = (g.detach().double().numpy().astype(np.float32), "F32")
    write_safetensors(a.out, out, {"oracle": "train_ref.py full-grads"})
    print(json.dumps({"loss": loss, "num_target_tokens": n, "tensors": len(grads)}))
    return 0


def cmd_full_train(a):
    model = FullGemma(a.model, torch.float64 if a.f64 else torch.float32, a.bf16_compute)
    replay(a, model)
    write_safetensors(os.path.join(a.out_dir, "masters.safetensors"),
                      {k: (p.detach().double().numpy().astype(np.float32), "F32") for k, p in model.params.items()},
                      {"oracle": "train_ref.py full-train"})
    return 0


def add_train_args(t):
    t.add_argument("--model", required=True)
    t.add_argument("--batch", required=True)
    t.add_argument("--micro-batch", type=int, required=True)
    t.add_argument("--grad-accum", type=int, required=True)
    t.add_argument("--steps", type=int, required=True)
    t.add_argument("--lr", type=float, required=True, help="peak learning rate")
    t.add_argument("--warmup", type=int, required=True)
    t.add_argument("--end-lr", type=float, required=True)
    t.add_argument("--weight-decay", type=float, required=True)
    t.add_argument("--beta1", type=float, default=0.9)
    t.add_argument("--beta2", type=float, default=0.999)
    t.add_argument("--eps", type=float, default=1e-8)
    t.add_argument("--max-grad-norm", type=float, default=None)
    t.add_argument("--out-dir", required=True)
    t.add_argument("--f64", action="store_true")


BF16_PRODUCTS_HELP = ("products against the bf16 checkpoint's matrices take bf16 inputs (and bf16 output "
                      "gradients), float32 accumulation (LoraGemma's bf16_products)")
PERMUTE_SUMS_HELP = "with --bf16-products: those products sum in the order of a permutation seeded by SEED"


def build_parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--self-test", action="store_true", help="run the oracle's self-checks")
    sub = ap.add_subparsers(dest="cmd")
    g = sub.add_parser("grads", help="loss and LoRA gradients of one batch")
    g.add_argument("--model", required=True)
    g.add_argument("--adapter", required=True)
    g.add_argument("--batch", required=True)
    g.add_argument("--out", required=True)
    g.add_argument("--f64", action="store_true")
    g.add_argument("--bf16-products", action="store_true", help=BF16_PRODUCTS_HELP)
    g.add_argument("--permute-sums", type=int, metavar="SEED", help=PERMUTE_SUMS_HELP)
    g.set_defaults(func=cmd_grads)
    t = sub.add_parser("train", help="replay an AdamW LoRA training run")
    add_train_args(t)
    t.add_argument("--adapter", required=True, help="initial adapter directory")
    t.add_argument("--bf16-products", action="store_true", help=BF16_PRODUCTS_HELP)
    t.add_argument("--permute-sums", type=int, metavar="SEED", help=PERMUTE_SUMS_HELP)
    t.set_defaults(func=cmd_train)
    fg = sub.add_parser("full-grads", help="loss and the gradient of every weight (full fine-tuning) of one batch")
    fg.add_argument("--model", required=True)
    fg.add_argument("--batch", required=True)
    fg.add_argument("--out", required=True)
    fg.add_argument("--f64", action="store_true")
    fg.add_argument("--bf16-compute", action="store_true", help="forward with the masters rounded to bf16")
    fg.set_defaults(func=cmd_full_grads)
    ft = sub.add_parser("full-train", help="replay an AdamW full fine-tuning run")
    add_train_args(ft)
    ft.add_argument("--bf16-compute", action="store_true", help="forward with the masters rounded to bf16")
    ft.set_defaults(func=cmd_full_train)
    return ap


def main(argv=None):
    ap = build_parser()
    a = ap.parse_args(argv)
    if a.self_test:
        return self_test()
    if not a.cmd:
        ap.error("give a subcommand (grads, train, full-grads, full-train) or --self-test")
    try:
        return a.func(a)
    except (OracleError, KeyError, ValueError, FileNotFoundError) as e:
        print(f"train_ref.py: error: {e}", file=sys.stderr)
        return 1


# ----------------------------------------------------------------------------------------------
# self-test
# ----------------------------------------------------------------------------------------------

class Checks:
    def __init__(self):
        self.passed = 0
        self.failed = []

    def check(self, name, ok, detail=""):
        print(f"  [{'ok' if ok else 'FAIL'}] {name} {detail}", flush=True)
        if ok:
            self.passed += 1
        else:
            self.failed.append(name)


ALL7 = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def random_adapter(model, cfg_raw, seed, b_std=0.2, zero_b=False):
    """{key: (array, "F32")} for every projection cfg's target_modules matches; A ~ N(0, 1/in)
    (so A x is O(1)), B ~ N(0, b_std^2 / r) or zero."""
    cfg = AdapterConfig(cfg_raw)
    rng = np.random.default_rng(seed)
    out = {}
    for mod, wname in sorted(model.lora_modules().items()):
        if not cfg.matches(mod):
            continue
        o, i = model.W(wname).shape
        A = rng.standard_normal((cfg.r, i)) / math.sqrt(i)
        B = np.zeros((o, cfg.r)) if zero_b else rng.standard_normal((o, cfg.r)) * b_std / math.sqrt(cfg.r)
        out[PEFT_PREFIX + mod + ".lora_A.weight"] = (A.astype(np.float32), "F32")
        out[PEFT_PREFIX + mod + ".lora_B.weight"] = (B.astype(np.float32), "F32")
    return out


def random_batch(vocab, lengths, mask_kind, seed):
    rng = np.random.default_rng(seed)
    toks, mask, offs = [], [], [0]
    for n in lengths:
        row = [2] + rng.integers(3, vocab, n - 1).tolist()
        if mask_kind == "all":
            m = [1] * n
        else:                      # assistant-like: targets only in the second half
            m = [0] * (n // 2) + [1] * (n - n // 2)
        toks += row
        mask += m
        offs.append(offs[-1] + n)
    return Batch(toks, mask, offs)


def fd_check(st, model, batch, key, n_entries, seed, h=1e-5, tol=1e-7):
    """Central differences of the batch loss w.r.t. entries of one adapter tensor (float64)."""
    _, _, grads = compute_grads(model, batch)
    g = grads[key].detach()
    p = model.params[key]
    gmax = float(g.abs().max())
    flat = g.reshape(-1)
    rng = np.random.default_rng(seed)
    idx = [int(flat.abs().argmax())] + rng.choice(flat.numel(), n_entries - 1, replace=False).tolist()
    worst = 0.0
    rows = list(range(batch.rows))
    for j in idx:
        with torch.no_grad():
            pf = p.view(-1)
            old = float(pf[j])
            pf[j] = old + h
            lp, _ = loss_and_grads(model, batch, rows, backward=False)
            pf[j] = old - h
            lm, _ = loss_and_grads(model, batch, rows, backward=False)
            pf[j] = old
        fd = (lp - lm) / (2 * h)
        worst = max(worst, abs(fd - float(flat[j])) / max(gmax, 1e-12))
    short = key[len(PEFT_PREFIX):].replace("model.language_model.", "").replace("model.", "")
    st.check(f"finite differences {short}", gmax > 1e-6 and worst < tol,
             f"(max|g| {gmax:.3e}, worst |fd-g|/max|g| {worst:.1e} over {len(idx)} entries, tol {tol:g})")


def self_test():
    import make_checkpoint
    t0 = time.time()
    st = Checks()
    tmp = tempfile.mkdtemp(prefix="train_ref_selftest_")
    torch.manual_seed(0)
    try:
        ckpts = {}
        for case in ("g4_basic", "g3_basic", "g4_ple_kvshare"):
            d = os.path.join(tmp, case)
            make_checkpoint.write_checkpoint(case, d, "f32")
            ckpts[case] = d

        # ---- (a) gradients vs central finite differences, float64 -----------------------------
        print("gradients vs central finite differences (float64)")
        m = LoraGemma(ckpts["g4_basic"], torch.float64)
        c = m.cfg
        kv_layer = next(l for l in range(c.L) if c.layer_k_eq_v(l))
        sl = [l for l in range(c.L) if c.layer_types[l] == "sliding_attention"]
        st.check("g4_basic has a K=V full layer and sliding layers",
                 kv_layer is not None and len(sl) >= 2, f"(K=V layer {kv_layer}, sliding {sl})")
        acfg = make_adapter_config(4, 8, ALL7)
        m.attach(AdapterConfig(acfg), random_adapter(m, acfg, 1))
        pre = PEFT_PREFIX + "model.language_model.layers."
        fd_keys = [f"{pre}{kv_layer}.self_attn.k_proj.lora_A.weight",
                   f"{pre}{kv_layer}.self_attn.k_proj.lora_B.weight",
                   f"{pre}{sl[1]}.self_attn.q_proj.lora_A.weight",
                   f"{pre}{sl[0]}.self_attn.v_proj.lora_B.weight",
                   f"{pre}{sl[2]}.mlp.down_proj.lora_B.weight",
                   f"{pre}{sl[3]}.mlp.down_proj.lora_A.weight",
                   f"{pre}{kv_layer}.self_attn.o_proj.lora_A.weight",
                   f"{pre}{sl[0]}.mlp.gate_proj.lora_A.weight"]
        # rows longer than the sliding window (8), one short row, one without targets.
        for kind in ("all", "assistant"):
            batch = random_batch(c.vocab, [19, 12, 5, 1], kind, 7)
            print(f" g4_basic, mask={kind}, rows {np.diff(batch.offsets).tolist()}")
            for i, k in enumerate(fd_keys):
                fd_check(st, m, batch, k, 3, 100 + i)
        # rsLoRA scaling, regex target_modules, Gemma 3 naming (model.layers.*), attention only.
        m3 = LoraGemma(ckpts["g3_basic"], torch.float64)
        acfg3 = make_adapter_config(2, 3, r"model\.layers\.\d+\.(self_attn\.(q|k|v|o)_proj|mlp\.down_proj)",
                                    use_rslora=True)
        m3.attach(AdapterConfig(acfg3), random_adapter(m3, acfg3, 2))
        st.check("rsLoRA scaling is alpha/sqrt(r)", abs(m3.adapter_cfg.scaling - 3 / math.sqrt(2)) < 1e-15)
        batch3 = random_batch(m3.cfg.vocab, [17, 9], "assistant", 8)
        print(" g3_basic (regex targets, rsLoRA), mask=assistant")
        for i, k in enumerate([PEFT_PREFIX + "model.layers.5.self_attn.k_proj.lora_A.weight",
                               PEFT_PREFIX + "model.layers.2.self_attn.v_proj.lora_A.weight",
                               PEFT_PREFIX + "model.layers.1.mlp.down_proj.lora_B.weight"]):
            fd_check(st, m3, batch3, k, 3, 200 + i)
        # PLE + KV sharing: LoRA on a KV-source layer's k_proj reaches the shared layers too.
        mp = LoraGemma(ckpts["g4_ple_kvshare"], torch.float64)
        acfgp = make_adapter_config(2, 4, ALL7 + ["per_layer_projection"])
        mp.attach(AdapterConfig(acfgp), random_adapter(mp, acfgp, 3))
        batchp = random_batch(mp.cfg.vocab, [14, 10], "all", 9)
        src = mp.cfg.kv_source[mp.cfg.L - 1]
        print(f" g4_ple_kvshare (KV source layer {src}), mask=all")
        for i, k in enumerate([f"{pre}{src}.self_attn.k_proj.lora_B.weight",
                               f"{pre}{mp.cfg.L - 1}.self_attn.q_proj.lora_A.weight",
                               f"{pre}2.per_layer_projection.lora_A.weight"]):
            fd_check(st, mp, batchp, k, 3, 300 + i)

        # f32 gradients track f64 ones (what a float32 trainer is compared against).
        m32 = LoraGemma(ckpts["g4_basic"], torch.float32)
        m32.attach(AdapterConfig(acfg), random_adapter(m32, acfg, 1))
        batch = random_batch(c.vocab, [19, 12, 5, 1], "assistant", 7)
        l64, n64, g64 = compute_grads(m, batch)
        l32, n32, g32 = compute_grads(m32, batch)
        rel = max(float((g32[k].double() - g64[k]).abs().max() / g64[k].abs().max().clamp_min(1e-30))
                  for k in g64)
        st.check("float32 grads match float64", n32 == n64 and abs(l32 - l64) < 1e-5 * abs(l64)
                 and rel < 1e-3, f"(loss {l32:.7f} vs {l64:.7f}, worst tensor rel err {rel:.1e}, tol 1e-3)")

        # ---- (b) identities --------------------------------------------------------------------
        print("identities")
        base = GemmaRef(ckpts["g4_basic"], torch.float64)
        for kind in ("all", "assistant"):
            b = random_batch(c.vocab, [19, 12, 5], kind, 11)
            mz = LoraGemma(ckpts["g4_basic"], torch.float64)
            mz.attach(AdapterConfig(acfg), random_adapter(mz, acfg, 4, zero_b=True))
            lz, nz, gz = compute_grads(mz, b)
            tot, nb = 0.0, 0
            for i in range(b.rows):
                toks, mk = b.row(i)
                lp = torch.log_softmax(base.logits(toks)[:-1], -1)
                for j in range(1, len(toks)):
                    if mk[j]:
                        tot -= float(lp[j - 1, toks[j]])
                        nb += 1
            ga = max(float(g.abs().max()) for k, g in gz.items() if k.endswith("lora_A.weight"))
            gb = max(float(g.abs().max()) for k, g in gz.items() if k.endswith("lora_B.weight"))
            st.check(f"B=0 adapter gives the base loss (mask={kind})",
                     nz == nb and abs(lz - tot / nb) <= 1e-12 * abs(lz) and ga == 0.0 and gb > 0,
                     f"(loss {lz:.12f} vs base {tot / nb:.12f}, max|dA| {ga}, max|dB| {gb:.2e})")
        toks = random_batch(c.vocab, [21], "all", 12).row(0)[0]
        for case, mm in (("g4_basic", m), ("g3_basic", m3), ("g4_ple_kvshare", mp)):
            merged = GemmaRef(ckpts[case], torch.float64)
            mw = mm.merged_weights()
            for n, w in mw.items():
                merged.w[n] = w
            with torch.no_grad():
                lo = mm.forward(toks)
            lm_ = merged.logits(toks)
            lb = GemmaRef(ckpts[case], torch.float64).logits(toks)
            err = float((lo - lm_).abs().max() / lm_.abs().max())
            eff = float((lo - lb).abs().max() / lb.abs().max())
            st.check(f"{case}: merged W + s*B@A gives the unmerged LoRA logits",
                     err < 1e-12 and eff > 1e-2,
                     f"({len(mw)} projections, rel err {err:.1e}, tol 1e-12; LoRA moves logits by {eff:.2f})")
        # the merge identity covers K=V: merging only the K=V layer's k_proj LoRA changes both
        # K and V of the base model; the unmerged forward must see the same.
        kcfg = make_adapter_config(4, 8, [f"layers.{kv_layer}.self_attn.k_proj"])
        mk_ = LoraGemma(ckpts["g4_basic"], torch.float64)
        mk_.attach(AdapterConfig(kcfg), random_adapter(mk_, kcfg, 5))
        merged = GemmaRef(ckpts["g4_basic"], torch.float64)
        merged.w.update(mk_.merged_weights())
        with torch.no_grad():
            lo = mk_.forward(toks)
        err = float((lo - merged.logits(toks)).abs().max() / lo.abs().max())
        # and V really is affected: zero the LoRA's effect on V alone -> different logits
        orig_pk = mk_.project_kv

        def k_only(l, a, cos, sin):
            k, _ = orig_pk(l, a, cos, sin)
            saved = mk_.lora
            mk_.lora = {}
            try:
                _, v = orig_pk(l, a, cos, sin)
            finally:
                mk_.lora = saved
            return k, v
        mk_.project_kv = k_only
        with torch.no_grad():
            lk = mk_.forward(toks)
        mk_.project_kv = orig_pk
        dv = float((lo - lk).abs().max() / lo.abs().max())
        st.check(f"K=V layer {kv_layer}: k_proj LoRA reaches V (merge identity holds)",
                 err < 1e-12 and dv > 1e-3, f"(merge rel err {err:.1e}; dropping it from V moves logits by {dv:.3f})")

        # adapter validation
        print("adapter validation")
        mv = LoraGemma(ckpts["g4_ple_kvshare"], torch.float32)
        vcfg = make_adapter_config(2, 4, ["q_proj"])
        good = random_adapter(mv, vcfg, 6)

        def rejects(name, cfg_raw, tensors, needle):
            try:
                mv.attach(AdapterConfig(cfg_raw), tensors)
                st.check(f"rejects {name}", False, "(accepted)")
            except OracleError as e:
                st.check(f"rejects {name}", needle in str(e), f"({str(e)[:110]})")
        bad = dict(good)
        bad[f"{pre}0.self_attn.qq_proj.lora_A.weight"] = good[f"{pre}0.self_attn.q_proj.lora_A.weight"]
        bad[f"{pre}0.self_attn.qq_proj.lora_B.weight"] = good[f"{pre}0.self_attn.q_proj.lora_B.weight"]
        rejects("an unknown module", make_adapter_config(2, 4, ["q_proj", "qq_proj"]), bad,
                "not a projection")
        shared = mv.cfg.L - 1
        kcfg2 = make_adapter_config(2, 4, [f"layers.{shared}.self_attn.k_proj"])
        rng = np.random.default_rng(0)
        kk = {f"{pre}{shared}.self_attn.k_proj.lora_A.weight": (rng.standard_normal((2, mv.cfg.D)), "F32"),
              f"{pre}{shared}.self_attn.k_proj.lora_B.weight": (rng.standard_normal((mv.cfg.K * mv.cfg.H, 2)), "F32")}
        rejects("a KV-shared layer's k_proj", kcfg2, kk, "not a projection")
        missing = {k: v for k, v in good.items() if ".3.self_attn" not in k}
        rejects("a targeted module without tensors", vcfg, missing, "has no tensors")
        rejects("a module outside target_modules", make_adapter_config(2, 4, ["o_proj"]), good,
                "does not match")
        rejects("lora_A without lora_B", vcfg,
                {k: v for k, v in good.items() if not k.endswith(f".{shared}.self_attn.q_proj.lora_B.weight")},
                "only lora_A")
        rejects("a rank that disagrees with r", make_adapter_config(3, 4, ["q_proj"]), good, "expected")

        # ---- (c) schedule ----------------------------------------------------------------------
        print("optax warmup_cosine_decay_schedule")
        s1 = warmup_cosine_decay_schedule(0.0, 1e-3, 10, 110, 1e-4)
        pts = [(s1, 0, 0.0), (s1, 5, 5e-4), (s1, 9, 9e-4), (s1, 10, 1e-3),
               (s1, 35, 1e-3 * (0.9 * 0.5 * (1 + math.sqrt(0.5)) + 0.1)),
               (s1, 60, 5.5e-4), (s1, 110, 1e-4), (s1, 500, 1e-4)]
        s2 = warmup_cosine_decay_schedule(0.0, 2.0, 0, 4, 0.0)
        pts += [(s2, 0, 2.0), (s2, 1, 1.0 + math.sqrt(0.5)), (s2, 2, 1.0), (s2, 4, 0.0)]
        s3 = warmup_cosine_decay_schedule(0.0, 0.0, 2, 5, 0.5)          # peak 0 -> alpha 0
        pts += [(s3, 1, 0.0), (s3, 4, 0.0)]
        worst = max(abs(f(x) - v) for f, x, v in pts)
        st.check("schedule at hand-computed points", worst < 1e-15,
                 f"({len(pts)} points, worst abs err {worst:.1e})")
        try:
            warmup_cosine_decay_schedule(0.0, 1e-3, 5, 5, 0.0)
            st.check("schedule with decay_steps <= warmup_steps is an error", False)
        except OracleError:
            st.check("schedule with decay_steps <= warmup_steps is an error", True)


        # ---- --permute-sums: the same products, only their sums reordered -------------------------
        print("permuted sums")
        gen = torch.Generator().manual_seed(7)
        x = torch.randn(5, 48, generator=gen, dtype=torch.float64, requires_grad=True)
        w = round_bf16(torch.randn(40, 48, generator=gen, dtype=torch.float64))
        dy = torch.randn(5, 40, generator=gen, dtype=torch.float64)
        outs = []
        for order in (None, SumOrder(1)):
            y = Bf16Product.apply(x, w, order)
            (gx,) = torch.autograd.grad(y, x, dy)
            outs.append((y, gx))
        err = max(float((a - b).abs().max() / b.abs().max()) for a, b in zip(outs[1], outs[0]))
        st.check("a permuted order of the bf16 products' sums gives the same products and input gradients",
                 err < 1e-12 and not torch.equal(SumOrder(1)(48), torch.arange(48)), f"(worst {err:.1e} of the max, f64)")
        # ---- CLI round trips and an independent AdamW replay ------------------------------------
        print("CLI")
        adir = os.path.join(tmp, "adapter")
        tcfg = make_adapter_config(2, 4, r".*\.(q_proj|k_proj|down_proj)")
        mt = LoraGemma(ckpts["g4_basic"], torch.float64)
        init = random_adapter(mt, tcfg, 13)
        # BF16 adapter on disk: the oracle widens it exactly
        os.makedirs(adir, exist_ok=True)
        with open(os.path.join(adir, "adapter_config.json"), "w") as f:
            json.dump(tcfg, f)
        write_safetensors(os.path.join(adir, "adapter_model.safetensors"),
                          {k: (v[0], "BF16") for k, v in init.items()})
        bpath = os.path.join(tmp, "batch.safetensors")
        tb = random_batch(c.vocab, [13, 9, 11, 6, 10], "assistant", 14)
        tb.write(bpath)
        gout = os.path.join(tmp, "grads.safetensors")
        rc = main(["grads", "--model", ckpts["g4_basic"], "--adapter", adir, "--batch", bpath,
                   "--out", gout, "--f64"])
        got = read_safetensors(gout)
        mt.attach(*read_adapter(adir))
        lref, nref, gref = compute_grads(mt, Batch.read(bpath))
        same_keys = set(got) == set(gref) | {"loss", "num_target_tokens"}
        gerr = max(float(np.abs(got[k][0] - gref[k].numpy().astype(np.float32)).max()) for k in gref) \
            if same_keys else float("inf")
        st.check("grads CLI writes loss, num_target_tokens and one F32 grad per adapter key",
                 rc == 0 and same_keys and all(got[k][1] == "F32" for k in gref) and
                 got["num_target_tokens"][0][0] == nref and abs(got["loss"][0][0] - lref) < 1e-6 and gerr == 0.0,
                 f"({len(gref)} tensors, loss {got['loss'][0][0]:.6f}, n {nref})")

        odir = os.path.join(tmp, "run")
        M, A, S, W = 1, 2, 4, 1
        hp = dict(lr=3e-2, warmup=W, end_lr=3e-3, weight_decay=0.1, beta1=0.8, beta2=0.95,
                  eps=1e-6, max_grad_norm=25.0)
        rc = main(["train", "--model", ckpts["g4_basic"], "--adapter", adir, "--batch", bpath,
                   "--micro-batch", str(M), "--grad-accum", str(A), "--steps", str(S),
                   "--lr", str(hp["lr"]), "--warmup", str(W), "--end-lr", str(hp["end_lr"]),
                   "--weight-decay", str(hp["weight_decay"]), "--beta1", str(hp["beta1"]),
                   "--beta2", str(hp["beta2"]), "--eps", str(hp["eps"]),
                   "--max-grad-norm", str(hp["max_grad_norm"]), "--out-dir", odir, "--f64"])
        with open(os.path.join(odir, "losses.json")) as f:
            recs = json.load(f)["steps"]
        final = read_safetensors(os.path.join(odir, "adapter_model.safetensors"))
        # independent replay: whole-step loss in one pass, hand-written clipping and AdamW.
        mr = LoraGemma(ckpts["g4_basic"], torch.float64)
        mr.attach(*read_adapter(adir))
        sched = warmup_cosine_decay_schedule(0.0, hp["lr"], W, S, hp["end_lr"])
        mom = {k: torch.zeros_like(p) for k, p in mr.params.items()}
        vel = {k: torch.zeros_like(p) for k, p in mr.params.items()}
        rb = Batch.read(bpath)
        ok_log, worst_l = len(recs) == S, 0.0
        for s in range(S):
            rows = [(s * M * A + j) % rb.rows for j in range(M * A)]
            for p in mr.params.values():
                p.grad = None
            n = sum(rb.targets(i) for i in rows)
            terms = [row_nll(mr, *rb.row(i)) for i in rows if rb.targets(i)]
            loss_t = sum(terms) / n
            loss_t.backward()
            gs = {k: p.grad.clone() for k, p in mr.params.items()}
            norm = math.sqrt(sum(float((g ** 2).sum()) for g in gs.values()))
            fac = hp["max_grad_norm"] / norm if norm > hp["max_grad_norm"] else 1.0
            lr_s, b1, b2 = sched(s), hp["beta1"], hp["beta2"]
            with torch.no_grad():
                for k, p in mr.params.items():
                    g = gs[k] * fac
                    mom[k] = b1 * mom[k] + (1 - b1) * g
                    vel[k] = b2 * vel[k] + (1 - b2) * g * g
                    mhat = mom[k] / (1 - b1 ** (s + 1))
                    vhat = vel[k] / (1 - b2 ** (s + 1))
                    p.mul_(1 - lr_s * hp["weight_decay"])
                    p.sub_(lr_s * mhat / (vhat.sqrt() + hp["eps"]))
            if ok_log:
                r = recs[s]
                ok_log = r["step"] == s + 1 and r["target_tokens"] == n and \
                    abs(r["lr"] - lr_s) < 1e-18 and abs(r["grad_norm"] - norm) < 1e-9 * norm
                worst_l = max(worst_l, abs(r["loss"] - float(loss_t)))
        werr = max(float(np.abs(final[k][0] - mr.params[k].detach().numpy().astype(np.float32)).max())
                   for k in mr.params)
        moved = max(float(np.abs(final[k][0] - init[k][0]).max()) for k in init)
        clipped = sum(r["grad_norm"] > hp["max_grad_norm"] for r in recs)
        unclipped = len(recs) - clipped
        st.check("train CLI matches an independent whole-batch loss + hand-written AdamW replay",
                 rc == 0 and ok_log and worst_l < 1e-12 and werr < 1e-6 and moved > 1e-3 and
                 recs[0]["lr"] == 0.0 and clipped >= 1 and unclipped >= 1,
                 f"(steps {len(recs)}, loss diff {worst_l:.1e}, final adapter max diff {werr:.1e}, "
                 f"moved {moved:.3f}, clipped/unclipped steps {clipped}/{unclipped}, rows wrap at step 3)")
        with open(os.path.join(odir, "adapter_config.json")) as f:
            st.check("train writes the adapter config", json.load(f) == tcfg)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    dt = time.time() - t0
    print(f"{st.passed} passed, {len(st.failed)} failed ({dt:.1f} s)")
    if st.failed:
        print("FAILED: " + "; ".join(st.failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
