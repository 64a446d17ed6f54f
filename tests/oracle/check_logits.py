#!/usr/bin/python3
"""Compare gemmakit's logits with the independent PyTorch reference (gemma_ref.py).

For every case (make_checkpoint.py) and dtype: write the checkpoint to a temp dir, draw a seeded
token sequence (BOS 2 first, length 24 > sliding window 8), compute reference logits, then run

    GEMMAKIT logprobs --model DIR --tokens 2,17,5,... --json --dump-logits OUT.npy --chunk C

for C in {0 (whole prompt in one forward), 1 (token-by-token decode through the KV cache),
5 (chunked prefill)}.  The binary must exit 0, write OUT.npy (float32, shape (T, V), .npy v1.0)
and print on stdout one JSON object {"tokens": [...], "logprobs": [...], "argmax": [...]} where
logprobs[i] = log_softmax(logits[i])[tokens[i+1]] (length T-1) and argmax[i] = argmax(logits[i])
(length T; T-1 accepted).

Pass criteria (per case, dtype and chunk):
  logits   max over positions of max|ours-ref| / max|ref|  < 1e-4 (f32) / 1e-2 (bf16)
  logprobs max |ours-ref|                                  < 1e-3 (f32) / 5e-2 (bf16)
  argmax   equal wherever the reference top-2 gap > max(1e-3, 2 * logits_tol * max|ref row|)
           (a smaller gap can flip within the logits tolerance itself)
  tokens   echoed unchanged
The reference for bf16 checkpoints uses the same bf16 weights upcast exactly; the reference math
runs in float64 (its float32 variant agrees to ~1e-6, see --self-test).

A binary that exits non-zero with "unsupported" in its output is UNSUPPORTED: a failure unless
the case is listed in --allow-unsupported.

    check_logits.py --gemmakit build/gemmakit [--cases a,b] [--dtype f32|bf16|both]
    check_logits.py --only-reference [--cases ...]     # reference only, no binary
    check_logits.py --self-test                         # oracle self-checks, no binary
Exit status 0 when everything passed, 1 otherwise.
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import gemma_ref  # noqa: E402
from gemma_ref import GemmaRef, round_to_bf16, rope_inv_freq  # noqa: E402
import make_checkpoint  # noqa: E402

TOL = {"f32": {"logits": 1e-4, "logprobs": 1e-3}, "bf16": {"logits": 1e-2, "logprobs": 5e-2}}
CHUNKS = (0, 1, 5)
SEQ_LEN = 24
BOS = 2
DEFAULT_BINARY = os.path.join(os.path.dirname(os.path.dirname(HERE)), "build", "gemmakit")


def rel_err(ours, ref):
    """max over rows of max|ours-ref| / max|ref| (tensors (T, V))."""
    ours = torch.as_tensor(ours, dtype=torch.float64)
    ref = torch.as_tensor(ref, dtype=torch.float64)
    return float(((ours - ref).abs().amax(-1) / ref.abs().amax(-1).clamp_min(1e-30)).max())


def pick_tokens(model, case, T=SEQ_LEN, seed=0):
    """Seeded ids in [3, vocab), BOS first.  For MoE cases the draw (out of 64 seeded candidates)
    with the largest reference top-k router margin is used, so that float noise cannot flip an
    expert choice."""
    V = model.cfg.vocab

    def draw(k):
        rng = np.random.default_rng(zlib.crc32(case.encode()) + 7919 * seed + 104729 * k)
        return [BOS] + [int(t) for t in rng.integers(3, V, T - 1)]

    if not model.cfg.moe:
        return draw(0), None
    best = None
    for k in range(64):
        toks = draw(k)
        _, aux = model.logits(toks, return_aux=True)
        if best is None or aux["router_margin"] > best[1]:
            best = (toks, aux["router_margin"])
    return best


def run_engine(binary, ckpt, tokens, chunk, workdir, timeout, activations="split", device="cpu"):
    """Runs the binary; returns dict(status=OK|UNSUPPORTED|ERROR, msg, logits, json).
    activations: --bf16-activations (split, f32-accurate, is what the bounds here are for; the
    CLI's default for bf16 checkpoints is round). device: logprobs' --device (cuda: the GPU
    engine against the same reference)."""
    out_npy = os.path.join(workdir, f"engine_chunk{chunk}.npy")
    if os.path.exists(out_npy):
        os.remove(out_npy)
    cmd = [binary, "logprobs", "--model", ckpt, "--tokens", ",".join(map(str, tokens)),
           "--json", "--dump-logits", out_npy, "--chunk", str(chunk), "--bf16-activations", activations]
    if device != "cpu":
        cmd += ["--device", device]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": "ERROR", "msg": f"timed out after {timeout}s: {' '.join(cmd)}"}
    except OSError as e:
        return {"status": "ERROR", "msg": f"cannot run {binary}: {e}"}
    both = (p.stdout or "") + "\n" + (p.stderr or "")
    if p.returncode != 0:
        tail = " | ".join(both.strip().splitlines()[-3:])[:400]
        st = "UNSUPPORTED" if "unsupported" in both.lower() else "ERROR"
        return {"status": st, "msg": f"exit {p.returncode}: {tail}"}
    js = None
    try:
        js = json.loads(p.stdout)
    except ValueError:
        for line in reversed(p.stdout.strip().splitlines()):
            line = line.strip()
            if line.startswith("{"):
                try:
                    js = json.loads(line)
                    break
                except ValueError:
                    pass
    if not isinstance(js, dict):
        return {"status": "ERROR", "msg": "stdout holds no JSON object: " + p.stdout[-300:]}
    if not os.path.exists(out_npy):
        return {"status": "ERROR", "msg": f"--dump-logits file {out_npy} was not written"}
    try:
        lg = np.load(out_npy, allow_pickle=False)
    except Exception as e:  # noqa: BLE001
        return {"status": "ERROR", "msg": f"cannot read {out_npy}: {e}"}
    return {"status": "OK", "logits": lg, "json": js, "msg": ""}


def compare(ref, tokens, eng, dtype):
    """Returns (ok, metrics dict, list of problems)."""
    tol = TOL[dtype]
    T, V = ref.shape
    problems = []
    m = {"logits": float("nan"), "logprobs": float("nan"), "argmax_bad": 0}
    lg = eng["logits"]
    if lg.dtype != np.float32:
        problems.append(f"logits dtype {lg.dtype}, expected float32")
    if tuple(lg.shape) != (T, V):
        problems.append(f"logits shape {tuple(lg.shape)}, expected {(T, V)}")
    elif not np.isfinite(lg).all():
        problems.append("non-finite logits")
    else:
        m["logits"] = rel_err(torch.from_numpy(lg.astype(np.float64)), ref)
        if not m["logits"] < tol["logits"]:
            problems.append(f"logits rel err {m['logits']:.3e} >= {tol['logits']:.0e}")
    js = eng["json"]
    if js.get("tokens") != list(tokens):
        problems.append("JSON tokens differ from the input")
    ref_lp = torch.log_softmax(ref, -1)
    want_lp = np.array([float(ref_lp[i, tokens[i + 1]]) for i in range(T - 1)])
    lp = js.get("logprobs")
    if not isinstance(lp, list) or len(lp) != T - 1:
        problems.append(f"JSON logprobs must be a list of {T - 1} numbers")
    else:
        try:
            lp = np.array(lp, dtype=np.float64)
            m["logprobs"] = float(np.abs(lp - want_lp).max())
        except (TypeError, ValueError):
            m["logprobs"] = float("inf")
        if not m["logprobs"] < tol["logprobs"]:
            problems.append(f"logprobs abs err {m['logprobs']:.3e} >= {tol['logprobs']:.0e}")
    am = js.get("argmax")
    if not isinstance(am, list) or len(am) not in (T, T - 1):
        problems.append(f"JSON argmax must be a list of {T} ids")
    else:
        top2 = torch.topk(ref, 2, dim=-1).values
        gap = (top2[:, 0] - top2[:, 1]).numpy()
        rowmax = ref.abs().amax(-1).numpy()
        ref_am = ref.argmax(-1).numpy()
        bad = [i for i in range(len(am))
               if gap[i] > max(1e-3, 2 * tol["logits"] * rowmax[i]) and am[i] != int(ref_am[i])]
        m["argmax_bad"] = len(bad)
        if bad:
            problems.append(f"argmax differs at positions {bad[:8]}")
    return not problems, m, problems


def fmt(x):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2e}"


def run_cases(args):
    cases = args.cases
    dtypes = ["f32", "bf16"] if args.dtype == "both" else [args.dtype]
    allow = set(args.allow_unsupported)
    binary = None
    if not args.only_reference:
        binary = args.gemmakit or os.environ.get("GEMMAKIT") or DEFAULT_BINARY
        if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            print(f"ERROR: gemmakit binary not found or not executable: {binary}\n"
                  f"       build it first (cmake -S . -B build && cmake --build build) or pass "
                  f"--gemmakit PATH; use --only-reference / --self-test to run the oracle alone.",
                  file=sys.stderr)
            return 1
    root = tempfile.mkdtemp(prefix="gk_oracle_") if not args.keep else args.keep
    os.makedirs(root, exist_ok=True)
    rows = []
    failed = False
    try:
        for case in cases:
            for dt in dtypes:
                ck = os.path.join(root, f"{case}_{dt}")
                t0 = time.time()
                make_checkpoint.write_checkpoint(case, ck, dt, seed=args.seed)
                model = GemmaRef(ck, torch.float64)
                tokens, margin = pick_tokens(model, case, args.seq_len, args.seed)
                ref = model.logits(tokens)
                np.save(os.path.join(ck, "reference_logits.npy"), ref.float().numpy())
                with open(os.path.join(ck, "tokens.txt"), "w") as f:
                    f.write(",".join(map(str, tokens)) + "\n")
                note = f"router margin {margin:.1e}" if margin is not None else ""
                if args.only_reference:
                    m32 = GemmaRef(ck, torch.float32).logits(tokens)
                    e = rel_err(m32, ref)
                    ok = e < 1e-5
                    rows.append((case, dt, "-", "REF-OK" if ok else "REF-BAD", e, None, None,
                                 f"f32-vs-f64 ref; {note}".strip("; ")))
                    failed |= not ok
                    continue
                for chunk in args.chunks:
                    eng = run_engine(binary, ck, tokens, chunk, ck, args.timeout, args.bf16_activations, args.device)
                    if eng["status"] == "UNSUPPORTED":
                        st = "UNSUPPORTED(allowed)" if case in allow else "FAILED(unsupported)"
                        failed |= case not in allow
                        rows.append((case, dt, chunk, st, None, None, None, eng["msg"]))
                        continue
                    if eng["status"] != "OK":
                        failed = True
                        rows.append((case, dt, chunk, "FAILED", None, None, None, eng["msg"]))
                        continue
                    ok, m, probs = compare(ref, tokens, eng, dt)
                    failed |= not ok
                    rows.append((case, dt, chunk, "PASS" if ok else "FAILED", m["logits"],
                                 m["logprobs"], m["argmax_bad"],
                                 "; ".join(probs) if probs else note))
                if args.verbose:
                    print(f"  {case}/{dt}: {time.time() - t0:.1f}s", file=sys.stderr)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    hdr = ("case", "dtype", "chunk", "status", "logits_rel", "logprob_abs", "argmax_bad", "notes")
    print(f"{hdr[0]:<20} {hdr[1]:<5} {hdr[2]:>5}  {hdr[3]:<20} {hdr[4]:>10} {hdr[5]:>11} "
          f"{hdr[6]:>10}  {hdr[7]}")
    for r in rows:
        print(f"{r[0]:<20} {r[1]:<5} {str(r[2]):>5}  {r[3]:<20} {fmt(r[4]):>10} {fmt(r[5]):>11} "
              f"{'-' if r[6] is None else r[6]:>10}  {r[7]}")
    print(f"tolerances: logits rel < {TOL['f32']['logits']:.0e} (f32) / {TOL['bf16']['logits']:.0e}"
          f" (bf16); logprobs abs < {TOL['f32']['logprobs']:.0e} / {TOL['bf16']['logprobs']:.0e}")
    if args.keep:
        print(f"checkpoints, tokens and logits kept under {root}")
    n_bad = sum(1 for r in rows if not (r[3] in ("PASS", "REF-OK") or r[3].endswith("(allowed)")))
    print(f"{len(rows) - n_bad} passed, {n_bad} failed")
    return 1 if failed else 0


# ----------------------------------------------------------------------------------------------
# self-test (no binary)
# ----------------------------------------------------------------------------------------------

# Each listed mutation must move the logits of its case by > MUTATION_MIN, i.e. an engine with
# that bug fails the f32 comparison by a wide margin.  Not listed, because invisible by design:
# "moe_no_renorm" (per-token scaling of the expert mix is removed by post_feedforward_layernorm_2).
G4_COMMON = ["flip_norm_offset", "attn_scale_inv_sqrt_hd", "no_v_norm", "no_qk_norm",
             "no_layer_scalar", "no_final_softcap", "rope_full_rotation",
             "rope_partial_rotated_denominator", "rope_interleaved", "rope_swap_theta",
             "no_sliding_window", "window_off_by_one", "embed_no_scale"]
MUTATIONS = {
    "g4_basic": G4_COMMON + ["softcap_30", "gqa_modulo", "v_after_knorm", "v_after_rope"],
    "g4_noshare_kv": G4_COMMON + ["softcap_30", "gqa_modulo", "v_from_k"],
    "g4_ple_kvshare": G4_COMMON + ["v_from_k", "ple_off", "ple_no_token", "ple_no_ctx",
                                   "kvshare_off", "kvshare_first_of_type", "double_wide_truncate"],
    "g4_moe": G4_COMMON + ["softcap_30", "gqa_modulo", "v_after_knorm", "moe_off",
                           "moe_no_expert_scale", "moe_router_no_scale",
                           "moe_router_from_mlp_input", "moe_experts_from_mlp_input"],
    "g4_textonly_sharded": G4_COMMON + ["softcap_30", "gqa_modulo", "v_after_knorm"],
    "g3_basic": ["flip_norm_offset", "attn_scale_inv_sqrt_hd", "attn_scale_one", "add_v_norm",
                 "no_qk_norm", "softcap_30", "rope_swap_theta", "rope_interleaved",
                 "no_sliding_window", "window_off_by_one", "embed_no_scale"],
}
# Reported only: effects near the f32 tolerance (gelu tanh vs erf differ by < 5e-4 anywhere).
INFO_MUTATIONS = ["gelu_exact"]
# Mutations checked on the bf16 checkpoint (they only differ there); reported, small by nature.
BF16_ONLY = {"g4_ple_kvshare": ["embed_scale_unrounded"], "g4_textonly_sharded": ["embed_scale_unrounded"]}
MUTATION_MIN = 10 * TOL["f32"]["logits"]     # a mutation must be 10x the f32 tolerance


class SelfTest:
    def __init__(self):
        self.results = []

    def check(self, name, ok, detail=""):
        self.results.append((name, bool(ok), detail))
        print(f"  [{'ok' if ok else 'FAIL'}] {name} {detail}", flush=True)

    def report(self):
        bad = [r for r in self.results if not r[1]]
        print(f"{len(self.results) - len(bad)} passed, {len(bad)} failed")
        return 1 if bad else 0


def ensure_ckpt(tmp, case, dt, seed):
    ck = os.path.join(tmp, f"{case}_{dt}")
    if not os.path.exists(os.path.join(ck, "config.json")):
        make_checkpoint.write_checkpoint(case, ck, dt, seed=seed)
    return ck


def self_test(args):
    st = SelfTest()
    part = args.self_test
    tmp = tempfile.mkdtemp(prefix="gk_oracle_selftest_")
    try:
        if part in ("all", "reference"):
            self_test_reference(args, st, tmp)
        if part in ("all", "driver"):
            self_test_driver(args, st, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return st.report()


def self_test_reference(args, st, tmp):
    print("spec constants and file format:")
    # bf16 rounding (spec 1.1 table) and round-to-nearest-even
    table = {5376: 73.5, 2816: 53.0, 2560: 50.5, 1536: 39.25, 640: 25.25, 1152: 34.0}
    got = {d: float(round_to_bf16(np.float32(math.sqrt(d)))) for d in table}
    st.check("bf16(sqrt(D)) matches spec table", got == table, str(got))
    st.check("bf16 round-to-nearest-even",
             float(round_to_bf16(np.float32(1 + 2 ** -8))) == 1.0 and
             float(round_to_bf16(np.float32(1 + 3 * 2 ** -8))) == 1 + 2 ** -6 and
             float(round_to_bf16(np.float32(-1 - 3 * 2 ** -8))) == -(1 + 2 ** -6))
    inv = rope_inv_freq({"rope_type": "proportional", "partial_rotary_factor": 0.25,
                         "rope_theta": 1e6}, 512)
    st.check("proportional RoPE (H=512, 0.25, 1e6): 64 angles, denominator 512",
             len(inv) == 256 and np.count_nonzero(inv) == 64 and inv[0] == 1.0 and
             abs(inv[1] - 1e6 ** (-2 / 512)) < 1e-15 and abs(inv[63] - 1e6 ** (-126 / 512)) < 1e-15)
    inv = rope_inv_freq({"rope_type": "default", "rope_theta": 1e4}, 256)
    st.check("default RoPE (H=256, 1e4)", len(inv) == 128 and np.count_nonzero(inv) == 128 and
             abs(inv[127] - 1e4 ** (-254 / 256)) < 1e-15)
    p = os.path.join(tmp, "t.safetensors")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 5)).astype(np.float32)
    b = rng.standard_normal((7,)).astype(np.float32)
    gemma_ref.write_safetensors(p, {"a": (a, "F32"), "b": (b, "BF16"),
                                    "s": (np.array(2.5, np.float32), "F32"),
                                    "i": (np.arange(4, dtype=np.int64), "I64")})
    r = gemma_ref.read_safetensors(p)
    with open(p, "rb") as f:
        hl = int.from_bytes(f.read(8), "little")
    st.check("safetensors round trip (F32, BF16, 0-d, I64; header 8-aligned)",
             np.array_equal(r["a"][0], a) and np.array_equal(r["b"][0], round_to_bf16(b)) and
             r["b"][1] == "BF16" and r["s"][0].shape == () and float(r["s"][0]) == 2.5 and
             r["i"][0].tolist() == [0, 1, 2, 3] and hl % 8 == 0)

    print("per case (f64 unless noted; T=%d, window 8):" % args.seq_len)
    for case in args.cases:
        for dt in ("f32", "bf16"):
            ck = ensure_ckpt(tmp, case, dt, args.seed)
            m64 = GemmaRef(ck, torch.float64)
            tokens, margin = pick_tokens(m64, case, args.seq_len, args.seed)
            full = m64.logits(tokens)
            tag = f"{case}/{dt}"
            m32 = GemmaRef(ck, torch.float32)
            e = rel_err(m32.logits(tokens), full)
            st.check(f"{tag}: float32 vs float64 reference", e < 1e-5, f"rel {e:.1e}")
            if margin is not None:
                st.check(f"{tag}: MoE router top-k margin", margin > 1e-3, f"{margin:.1e}")
            # (a) incremental / prefix consistency: no future leakage, window edges
            W = m64.cfg.window or 8
            worst = 0.0
            for k in sorted({1, 2, W - 1, W, W + 1, 2 * W + 1, len(tokens) - 1}):
                worst = max(worst, rel_err(m64.logits(tokens[:k]), full[:k]))
            st.check(f"{tag}: prefix logits == rows of full pass", worst < 1e-12, f"rel {worst:.1e}")
            if dt == "bf16":
                # the engine-side dtype handling: bf16 weights must be the exact bf16 values
                emb = m64.W("embed_tokens.weight").float().numpy()
                st.check(f"{tag}: bf16 weights exactly representable",
                         np.array_equal(emb, round_to_bf16(emb)), f"embed_scale {m64.embed_scale}")
                for knob in BF16_ONLY.get(case, []):
                    mm = GemmaRef(ck, torch.float64, knobs=[knob])
                    e = rel_err(mm.logits(tokens), full)
                    st.check(f"{tag}: mutation {knob} visible (info, > 1e-5)", e > 1e-5, f"rel {e:.1e}")
                continue
            # (b) second formulation: token-by-token loops vs masked matrix
            t0 = time.time()
            e = rel_err(m64.logits_stepwise(tokens), full)
            st.check(f"{tag}: stepwise loop formulation == matrix formulation", e < 1e-10,
                     f"rel {e:.1e} ({time.time() - t0:.1f}s)")
            # sanity: softcap respected, no NaN
            cap = m64.cfg.final_softcap
            st.check(f"{tag}: finite logits within softcap",
                     bool(torch.isfinite(full).all()) and (cap is None or float(full.abs().max()) < cap),
                     f"max|logit| {float(full.abs().max()):.2f} cap {cap}")
            # (c) every feature reaches the logits (mutation sensitivity)
            weak = []
            detail = []
            for knob in MUTATIONS.get(case, []):
                mm = GemmaRef(ck, torch.float64, knobs=[knob])
                e = rel_err(mm.logits(tokens), full)
                detail.append(f"{knob}={e:.1e}")
                if not e > MUTATION_MIN:
                    weak.append(knob)
            info = []
            for knob in INFO_MUTATIONS:
                mm = GemmaRef(ck, torch.float64, knobs=[knob])
                info.append(f"{knob}={rel_err(mm.logits(tokens), full):.1e}")
            st.check(f"{tag}: {len(MUTATIONS.get(case, []))} mutations each change logits "
                     f"by > {MUTATION_MIN:.0e}", not weak,
                     ("weak: " + ",".join(weak) + "; ") * bool(weak) + " ".join(detail) +
                     " | info: " + " ".join(info))

    # loader: the same weights in another layout / sharding give identical logits
    print("loader layouts:")
    for case, layout, shards in (("g4_basic", "text", 3), ("g4_basic", "multimodal", 2),
                                 ("g4_textonly_sharded", "multimodal", 1),
                                 ("g3_basic", "gemma3", 2)):
        a_dir = ensure_ckpt(tmp, case, "f32", args.seed)
        b_dir = os.path.join(tmp, f"{case}_f32_{layout}_{shards}")
        make_checkpoint.write_checkpoint(case, b_dir, "f32", shards=shards, layout=layout,
                                         seed=args.seed)
        ma, mb = GemmaRef(a_dir, torch.float64), GemmaRef(b_dir, torch.float64)
        tokens, _ = pick_tokens(ma, case, args.seq_len, args.seed)
        same = torch.equal(ma.logits(tokens), mb.logits(tokens))
        st.check(f"{case}: layout {layout} with {shards} shard(s) gives identical logits", same,
                 f"skipped {len(mb.skipped)} non-text tensors")
    # Gemma 3 vs Gemma 4 semantics: the same tensors read under the other family's rules
    g3 = ensure_ckpt(tmp, "g3_basic", "f32", args.seed)
    m3 = GemmaRef(g3, torch.float64)
    one4, zero4 = torch.ones(4, dtype=torch.float64), torch.zeros(4, dtype=torch.float64)
    st.check("gemma3 config parsed as gemma3 (scale 48^-0.5, no softcap, 1+w norms)",
             m3.cfg.family == "gemma3" and m3.cfg.final_softcap is None and
             abs(m3.attn_scale(0) - 48 ** -0.5) < 1e-15 and
             float(m3.norm(one4, zero4)[0]) > 0.99)
    m4 = GemmaRef(ensure_ckpt(tmp, "g4_basic", "f32", args.seed), torch.float64)
    st.check("gemma4 config parsed as gemma4 (scale 1, x*w norms, k_eq_v on full layer 5)",
             m4.cfg.family == "gemma4" and m4.attn_scale(5) == 1.0 and m4.cfg.layer_k_eq_v(5) and
             not m4.cfg.layer_k_eq_v(0) and m4.cfg.head_dim(5) == 64 and m4.cfg.kv_heads(5) == 1 and
             float(m4.norm(one4, zero4)[0]) == 0.0)
    mp = GemmaRef(ensure_ckpt(tmp, "g4_ple_kvshare", "f32", args.seed), torch.float64)
    st.check("KV sharing sources (8 layers sssfsssf, 2 shared): layer 6 -> 5, layer 7 -> 3",
             mp.cfg.kv_source == [0, 1, 2, 3, 4, 5, 5, 3] and mp.cfg.mlp_width(6) == 2 * mp.cfg.F
             and mp.cfg.mlp_width(5) == mp.cfg.F)


def self_test_driver(args, st, tmp):
    """The comparison driver itself, against a fake engine built on the reference."""
    print("driver against fake_gemmakit.py:")
    fake = os.path.join(HERE, "fake_gemmakit.py")
    for mode, case, expect in (("exact", "g4_basic", 0), ("mutate:no_v_norm", "g4_basic", 1),
                               ("unsupported", "g4_moe", 1), ("unsupported-allowed", "g4_moe", 0),
                               ("bf16noise", "g4_basic", 0)):
        cmd = [sys.executable, os.path.abspath(__file__), "--gemmakit", fake, "--cases", case,
               "--chunks", "0,1" if mode == "exact" else "0",
               "--dtype", "bf16" if mode == "bf16noise" else "f32"]
        if mode == "unsupported-allowed":
            cmd += ["--allow-unsupported", case]
        env = dict(os.environ, FAKE_GEMMAKIT_MODE=mode.replace("-allowed", ""))
        pr = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        st.check(f"driver exit {expect} for fake engine mode '{mode}'", pr.returncode == expect,
                 f"(got {pr.returncode})" + ("" if pr.returncode == expect else
                                             "\n" + pr.stdout[-1500:] + pr.stderr[-1500:]))
    pr = subprocess.run([sys.executable, os.path.abspath(__file__), "--gemmakit",
                         os.path.join(tmp, "no_such_binary"), "--cases", "g4_basic"],
                        capture_output=True, text=True, timeout=120)
    st.check("missing binary: exit 1 with a clear message",
             pr.returncode == 1 and "not found" in pr.stderr, pr.stderr.strip().splitlines()[0][:100])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gemmakit", help=f"engine binary (default $GEMMAKIT or {DEFAULT_BINARY})")
    ap.add_argument("--cases", default=",".join(make_checkpoint.CASES),
                    help="comma-separated; known: " + ", ".join(make_checkpoint.CASES))
    ap.add_argument("--dtype", choices=["f32", "bf16", "both"], default="f32")
    ap.add_argument("--chunks", default=",".join(map(str, CHUNKS)), help="--chunk values to run")
    ap.add_argument("--allow-unsupported", default="", help="cases the binary may refuse")
    ap.add_argument("--only-reference", action="store_true", help="reference only, no binary")
    ap.add_argument("--self-test", nargs="?", const="all", choices=["all", "reference", "driver"],
                    help="oracle self-checks, no binary (part: reference | driver | all)")
    ap.add_argument("--bf16-activations", choices=["split", "round"], default="split",
                    help="the engine's bf16 activation mode (the bounds are split's)")
    ap.add_argument("--device", default="cpu", help="the engine's --device (cpu, cuda, cuda:N)")
    ap.add_argument("--seq-len", type=int, default=SEQ_LEN)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=int, default=120, help="seconds per binary run")
    ap.add_argument("--keep", help="write checkpoints/logits here and keep them")
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args()
    args.cases = [c for c in args.cases.split(",") if c]
    for c in args.cases:
        make_checkpoint.case_spec(c)
    args.allow_unsupported = [c for c in args.allow_unsupported.split(",") if c]
    args.chunks = [int(c) for c in args.chunks.split(",") if c != ""]
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    if args.self_test:
        return self_test(args)
    return run_cases(args)


if __name__ == "__main__":
    sys.exit(main())
