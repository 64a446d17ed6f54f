#!/usr/bin/env python3
"""`gemmakit convert --from hf --to gguf` end to end, checked by an independent GGUF parser.

The files gemmakit writes are parsed by @huggingface/gguf (npm; Hugging Face's JavaScript
parser, installed once into <source>/build/npm-gguf) through tests/bridge/gguf_npm_check.mjs.
What it reads is compared with what llama.cpp's converter (convert_hf_to_gguf.py, Gemma4Model /
Gemma3Model) would write, worked out here in Python from the checkpoint's config.json,
safetensors header and tokenizer files, not from gemmakit's code:
  * every metadata key, its GGUF value type and value (tokens, scores, token types, merges,
    special ids, chat template included), and no other key;
  * every tensor name, shape (reversed PyTorch shape), ggml type, and that offsets are aligned,
    in order and inside the file;
  * the tensor bytes at the offsets the parser reports: F32/F16/BF16 equal to the checkpoint
    values rounded as numpy / gguf-py round them, Q8_0 byte-identical to gguf-py's quants.Q8_0
    (re-implemented below with numpy);
  * the CLI refuses an unsupported --from/--to pair with one error line.
Cases: a Gemma 4 `tiny` checkpoint from `gemmakit init` with the real 262144-token Gemma
tokenizer (bf16 and q8_0), and a Gemma 3 toy written by this script (f16 and q8_0).
Exit status 77 (a skip for ctest) when node, the npm package or the tokenizer is unavailable.

usage: gguf_export_e2e_test.py --gemmakit path/to/gemmakit
"""
import argparse
import fcntl
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
NPM_DIR = os.environ.get("GK_GGUF_NPM_DIR", os.path.join(SRC, "build", "npm-gguf"))
NPM_PKG = "@huggingface/gguf@^0.4"
TOKENIZER_DIR = os.path.join(SRC, "build", "tokenizer", "gemma3")
SKIP = 77

# GGUFValueType and GGMLQuantizationType codes (gguf-py constants.py).
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
T_F32, T_F16, T_Q8_0, T_BF16 = 0, 1, 8, 30
FILE_TYPE = {"f32": 0, "f16": 1, "q8_0": 7, "bf16": 32}

passed = failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAIL:", what)
    return ok


def skip(msg):
    print("SKIP:", msg)
    sys.exit(SKIP)


# ---- the npm parser --------------------------------------------------------------------------

def ensure_npm():
    if shutil.which("node") is None or shutil.which("npm") is None:
        skip("node/npm not found (scripts/install_deps.sh installs them)")
    pkg = os.path.join(NPM_DIR, "node_modules", "@huggingface", "gguf", "package.json")
    os.makedirs(NPM_DIR, exist_ok=True)
    with open(NPM_DIR + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(pkg):
            print("gguf_export_e2e: npm install", NPM_PKG, "into", NPM_DIR)
            r = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--silent", "--prefix", NPM_DIR, NPM_PKG],
                               capture_output=True, text=True)
            if r.returncode != 0:
                skip("npm install %s failed (the npm registry must be reachable): %s" % (NPM_PKG, r.stderr.strip()[-300:]))
    with open(pkg) as f:
        print("gguf_export_e2e: @huggingface/gguf", json.load(f)["version"])


def npm_parse(path):
    r = subprocess.run(["node", os.path.join(HERE, "gguf_npm_check.mjs"), NPM_DIR, path], capture_output=True, text=True)
    if r.returncode != 0:
        check(False, "@huggingface/gguf could not parse %s: %s" % (path, r.stderr.strip()[-500:]))
        return None
    return json.loads(r.stdout)


# ---- checkpoints -----------------------------------------------------------------------------

def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        raw = data[b:end]
        if e["dtype"] == "F32":
            a = np.frombuffer(raw, dtype="<f4")
        elif e["dtype"] == "F16":
            a = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        elif e["dtype"] == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError("dtype " + e["dtype"])
        out[name] = a.reshape(e["shape"])
    return out


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def write_gemma3_toy(d):
    """A Gemma 3 text checkpoint (Gemma3ForCausalLM layout) with random f32 weights."""
    L, D, F, N, K, H, V = 6, 64, 128, 4, 1, 32, 300
    cfg = {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "vocab_size": V, "hidden_size": D,
           "intermediate_size": F, "num_hidden_layers": L, "num_attention_heads": N, "num_key_value_heads": K,
           "head_dim": H, "sliding_window": 8, "max_position_embeddings": 32768, "rms_norm_eps": 1e-6,
           "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "rope_scaling": None,
           "query_pre_attn_scalar": H, "final_logit_softcapping": None, "attn_logit_softcapping": None,
           "layer_types": ["sliding_attention"] * 5 + ["full_attention"], "hidden_activation": "gelu_pytorch_tanh",
           "bos_token_id": 2, "eos_token_id": [1, 106], "pad_token_id": 0, "tie_word_embeddings": True,
           "torch_dtype": "float32"}
    rng = np.random.default_rng(5)
    t = {"model.embed_tokens.weight": rng.normal(0, 0.02, (V, D)), "model.norm.weight": rng.normal(0, 0.1, (D,))}
    for l in range(L):
        p = "model.layers.%d." % l
        for n in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"):
            t[p + n + ".weight"] = rng.normal(0, 0.1, (D,))
        t[p + "self_attn.q_proj.weight"] = rng.normal(0, 0.05, (N * H, D))
        t[p + "self_attn.k_proj.weight"] = rng.normal(0, 0.05, (K * H, D))
        t[p + "self_attn.v_proj.weight"] = rng.normal(0, 0.05, (K * H, D))
        t[p + "self_attn.o_proj.weight"] = rng.normal(0, 0.05, (D, N * H))
        t[p + "self_attn.q_norm.weight"] = rng.normal(0, 0.1, (H,))
        t[p + "self_attn.k_norm.weight"] = rng.normal(0, 0.1, (H,))
        t[p + "mlp.gate_proj.weight"] = rng.normal(0, 0.05, (F, D))
        t[p + "mlp.up_proj.weight"] = rng.normal(0, 0.05, (F, D))
        t[p + "mlp.down_proj.weight"] = rng.normal(0, 0.05, (D, F))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    write_safetensors(os.path.join(d, "model.safetensors"), t)


# ---- what llama.cpp's converter writes (from its Python, not from gemmakit) -------------------

# gguf-py tensor_mapping.py / constants.py TENSOR_NAMES for the Gemma 3 / Gemma 4 text tensors.
LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "post_attention_norm.weight",
    "pre_feedforward_layernorm.weight": "ffn_norm.weight",
    "post_feedforward_layernorm.weight": "post_ffw_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight", "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "layer_scalar": "layer_output_scale.weight",  # Gemma4Model.modify_tensors appends ".weight"
}
TOP_NAMES = {"embed_tokens.weight": "token_embd.weight", "norm.weight": "output_norm.weight"}


def gguf_name(hf):
    hf = hf[len("model."):]
    if hf in TOP_NAMES:
        return TOP_NAMES[hf]
    m = re.fullmatch(r"layers\.(\d+)\.(.+)", hf)
    return "blk.%s.%s" % (m.group(1), LAYER_NAMES[m.group(2)])


def ggml_type(name, ndim, outtype, ne0):
    # ModelBase.prepare_tensors: 1-D and norms F32; then the --outtype; Q8_0 -> F16 on QuantError.
    if ndim <= 1 or name.endswith("_norm.weight") or not name.endswith(".weight"):
        return T_F32
    t = {"f32": T_F32, "f16": T_F16, "bf16": T_BF16, "q8_0": T_Q8_0}[outtype]
    return T_F16 if t == T_Q8_0 and ne0 % 32 else t


def np_roundf(n):  # gguf-py quants.np_roundf: round half away from zero
    a = abs(n)
    floored = np.floor(a)
    b = floored + np.floor(2 * (a - floored))
    return np.sign(n) * b


def q8_0_bytes(x):  # gguf-py quants.Q8_0.quantize_blocks, bit-exact with ggml
    blocks = x.astype(np.float32).reshape(-1, 32)
    d = np.abs(blocks).max(axis=1, keepdims=True) / np.float32(127)
    with np.errstate(divide="ignore"):
        idd = np.where(d == 0, 0, 1 / d).astype(np.float32)
    qs = np_roundf(blocks * idd)
    return np.concatenate([d.astype(np.float16).view(np.uint8), qs.astype(np.int8).view(np.uint8)], axis=1).tobytes()


def bf16_bytes(x):  # gguf-py quants.BF16.quantize_blocks
    n = x.astype(np.float32).view(np.uint32)
    n = np.where((n & 0x7FFFFFFF) > 0x7F800000, (n & np.uint32(0xFFFF0000)) | np.uint32(64 << 16), n)
    n = (n.astype(np.uint64) + (0x7FFF + ((n >> 16) & 1))) >> 16
    return n.astype(np.uint16).tobytes()


def encode(x, t):
    x = x.astype(np.float32)
    if t == T_F32:
        return x.astype("<f4").tobytes()
    if t == T_F16:
        return x.astype("<f2").tobytes()
    if t == T_BF16:
        return bf16_bytes(x)
    return q8_0_bytes(x)


def tensor_nbytes(t, ne):
    n = int(np.prod(ne))
    return {T_F32: 4 * n, T_F16: 2 * n, T_BF16: 2 * n, T_Q8_0: n // 32 * 34}[t]


def special_vocab(d, tok, tcfg, cfg):
    """gguf-py SpecialVocab (no merges): ids, add_* flags, chat template."""
    ids, add = {}, {}
    added = tok.get("added_tokens", [])
    sb = tcfg.get("bos_token") if tcfg else None
    se = tcfg.get("eos_token") if tcfg else None
    for p in [tok.get("post_processor") or {}]:
        if p.get("type") == "TemplateProcessing" and len(p.get("single", [])) > 1:
            first = p["single"][0].get("SpecialToken", {}).get("id")
            last = p["single"][-1].get("SpecialToken", {}).get("id")
            if first:
                add["bos"] = first == sb
            if last:
                add["eos"] = last == se
    tmpl = tcfg.get("chat_template") if tcfg else None
    for typ in ("bos", "eos", "unk", "sep", "pad", "cls", "mask"):
        if tcfg and isinstance(tcfg.get("add_%s_token" % typ), bool):
            add[typ] = tcfg["add_%s_token" % typ]
        e = tcfg.get(typ + "_token") if tcfg else None
        content = e if isinstance(e, str) else (e or {}).get("content") if isinstance(e, dict) else None
        if content is None:
            continue
        tid = next((a["id"] for a in added if a["content"] == content), None)
        if tid is not None and typ not in ids:
            ids[typ] = tid
    for typ in ("bos", "eos", "unk", "sep", "pad", "cls", "mask"):
        v = cfg.get(typ + "_token_id")
        if isinstance(v, int) and typ not in ids:
            ids[typ] = v
    return ids, add, tmpl


ID_KEYS = {"bos": "tokenizer.ggml.bos_token_id", "eos": "tokenizer.ggml.eos_token_id",
           "unk": "tokenizer.ggml.unknown_token_id", "sep": "tokenizer.ggml.seperator_token_id",
           "pad": "tokenizer.ggml.padding_token_id", "mask": "tokenizer.ggml.mask_token_id"}
VISIBLE = {"<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", "<|tool_response>", "<tool_response|>", '<|"|>'}


def looks_special(t):
    return (t in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") or (t.startswith("<|") and t.endswith("|>"))
            or (t.startswith("<unused") and t.endswith(">")))


def expected(d, outtype):
    """{key: (type, subtype, value)} and [(name, ne, ggml type, values)] for checkpoint d."""
    cfg = json.load(open(os.path.join(d, "config.json")))
    tc = cfg.get("text_config", cfg)
    tok = json.load(open(os.path.join(d, "tokenizer.json")))
    tcfg = json.load(open(os.path.join(d, "tokenizer_config.json")))
    g4 = tc["model_type"].startswith("gemma4")
    arch = "gemma4" if g4 else "gemma3"
    a = arch + "."
    L = tc["num_hidden_layers"]
    swa = [t == "sliding_attention" for t in tc["layer_types"]]
    V = tc["vocab_size"]
    kv = {
        "general.architecture": (STRING, None, arch), "general.type": (STRING, None, "model"),
        "general.name": (STRING, None, os.path.basename(os.path.normpath(d))),
        "general.file_type": (U32, None, FILE_TYPE[outtype]), "general.quantization_version": (U32, None, 2),
        a + "block_count": (U32, None, L), a + "context_length": (U32, None, tc["max_position_embeddings"]),
        a + "embedding_length": (U32, None, tc["hidden_size"]),
        a + "feed_forward_length": (U32, None, tc["intermediate_size"]),
        a + "attention.head_count": (U32, None, tc["num_attention_heads"]),
        a + "attention.layer_norm_rms_epsilon": (F32, None, tc["rms_norm_eps"]),
        a + "attention.sliding_window": (U32, None, tc["sliding_window"]),
    }
    if g4:
        rp = tc["rope_parameters"]
        kv[a + "rope.freq_base"] = (F32, None, rp["full_attention"]["rope_theta"])
        kv[a + "rope.freq_base_swa"] = (F32, None, rp["sliding_attention"]["rope_theta"])
        hd, ghd = tc["head_dim"], tc["global_head_dim"]
        kv[a + "attention.key_length"] = (U32, None, ghd)
        kv[a + "attention.value_length"] = (U32, None, ghd)
        kv[a + "attention.key_length_swa"] = (U32, None, hd)
        kv[a + "attention.value_length_swa"] = (U32, None, hd)
        kv[a + "rope.dimension_count"] = (U32, None, ghd)
        kv[a + "rope.dimension_count_swa"] = (U32, None, int(hd * tc.get("partial_rotary_factor", 1.0)))
        kv[a + "attention.shared_kv_layers"] = (U32, None, tc["num_kv_shared_layers"])
        kv[a + "embedding_length_per_layer_input"] = (U32, None, tc.get("hidden_size_per_layer_input") or 0)
        kv[a + "attention.sliding_window_pattern"] = (ARRAY, BOOL, swa)
        if tc.get("final_logit_softcapping"):
            kv[a + "final_logit_softcapping"] = (F32, None, tc["final_logit_softcapping"])
        kvh = [tc["num_key_value_heads"] if s else (tc["num_global_key_value_heads"] if tc.get("attention_k_eq_v")
                                                   else tc["num_key_value_heads"]) for s in swa]
        kv[a + "attention.head_count_kv"] = (U32, None, kvh[0]) if len(set(kvh)) == 1 else (ARRAY, I32, kvh)
        assert not tc.get("use_double_wide_mlp") and not tc.get("enable_moe_block")  # not in these cases
    else:
        kv[a + "rope.freq_base"] = (F32, None, tc["rope_theta"])
        kv[a + "rope.freq_base_swa"] = (F32, None, tc["rope_local_base_freq"])
        kv[a + "attention.key_length"] = (U32, None, tc["head_dim"])
        kv[a + "attention.value_length"] = (U32, None, tc["head_dim"])
        kv[a + "attention.head_count_kv"] = (U32, None, tc["num_key_value_heads"])

    # tokenizer
    vocab = tok["model"]["vocab"]
    by_id = {i: p for p, i in vocab.items()}
    special = {x["id"]: x["special"] for x in tok["added_tokens"]}
    merges = tok["model"]["merges"]
    is_byte = lambda t: re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", t) is not None
    if g4:
        n = len(vocab)
        tokens = [by_id[i] for i in range(n)]
        types = []
        for i, t in enumerate(tokens):
            ty = 6 if is_byte(t) else (3 if special.get(i) else 1)
            types.append(4 if t in VISIBLE else ty)
        scores = [-1000.0] * n
        mstr = [" ".join(p.replace(" ", "\u0120") for p in m) if isinstance(m, list) else m for m in merges]
        if n > V:  # keep what the model can produce; drop merges that need a dropped token
            tokens, types, scores = tokens[:V], types[:V], scores[:V]
            kept = set(tokens)
            mstr = [m for m in mstr if all(x in kept for x in (m.split(" ")[0], m.split(" ")[1], m.replace(" ", "")))]
        kv["tokenizer.ggml.model"] = (STRING, None, "gemma4")
        kv["tokenizer.ggml.merges"] = (ARRAY, STRING, mstr)
    else:
        tokens = ["[PAD%d]" % i for i in range(V)]
        scores, types = [-10000.0] * V, [5] * V
        first = {}
        for r, m in enumerate(merges):
            first.setdefault(vocab.get("".join(m) if isinstance(m, list) else m.replace(" ", "")), r)
        for p, i in vocab.items():
            if i < V:
                tokens[i] = p
                scores[i] = -float(first[i]) if i in first else 0.0
                types[i] = 6 if is_byte(p) else (2 if p == tok["model"].get("unk_token") else 1)
        for k, e in tcfg["added_tokens_decoder"].items():
            i = int(k)
            if i >= V:
                continue
            t = e["content"]
            if e.get("special") or looks_special(t):
                types[i] = 3
            else:
                t = t.replace("\u2581", " ")
                types[i] = 4
            scores[i], tokens[i] = -1000.0, t
        kv["tokenizer.ggml.model"] = (STRING, None, "llama")
        kv["tokenizer.ggml.pre"] = (STRING, None, "default")
    kv["tokenizer.ggml.tokens"] = (ARRAY, STRING, tokens)
    kv["tokenizer.ggml.scores"] = (ARRAY, F32, scores)
    kv["tokenizer.ggml.token_type"] = (ARRAY, I32, types)
    ids, add, tmpl = special_vocab(d, tok, tcfg, cfg)
    for typ, i in ids.items():
        if typ in ID_KEYS and i < len(tokens):
            kv[ID_KEYS[typ]] = (U32, None, i)
    if g4:
        add["bos"] = True  # Gemma4Model.set_vocab: add_add_bos_token(True)
    for typ in ("bos", "eos", "sep"):
        if typ in add:
            kv["tokenizer.ggml.add_%s_token" % typ] = (BOOL, None, add[typ])
    if tmpl:
        kv["tokenizer.chat_template"] = (STRING, None, tmpl)
    kv["tokenizer.ggml.add_space_prefix"] = (BOOL, None, False)

    # tensors
    src = read_safetensors(os.path.join(d, "model.safetensors"))
    tensors = []
    if g4:
        ghd = tc["global_head_dim"]
        prf = tc["rope_parameters"]["full_attention"]["partial_rotary_factor"]
        rot = int(ghd * prf / 2)
        tensors.append(("rope_freqs.weight", [ghd // 2], T_F32, np.array([1.0] * rot + [1e30] * (ghd // 2 - rot), np.float32)))
    for hf, x in src.items():
        name = gguf_name(hf)
        if not g4 and hf.endswith("norm.weight"):
            x = x + np.float32(1)  # Gemma3Model.norm_shift
        ne = list(reversed(x.shape)) if x.ndim else [1]
        tensors.append((name, ne, ggml_type(name, x.ndim, outtype, ne[0]), x))
    return kv, tensors


# ---- comparison --------------------------------------------------------------------------------

def strip_bom(s):
    # @huggingface/gguf decodes strings with TextDecoder, which drops a leading U+FEFF (BOM):
    # 6 of Gemma's 262144 pieces start with one. Compared with it removed on both sides.
    return s[1:] if isinstance(s, str) and s.startswith("\ufeff") else s


def same_value(t, sub, want, got):
    if t == ARRAY and sub == STRING:
        return len(want) == len(got) and all(strip_bom(a) == b for a, b in zip(want, got))
    if t == STRING:
        return strip_bom(want) == got
    if t == F32:
        return np.float32(want) == np.float32(got)
    if t == ARRAY and sub == F32:
        return len(want) == len(got) and np.array_equal(np.array(want, np.float32), np.array(got, np.float32))
    if t in (U64, I64):
        return str(want) == str(got)
    return want == got


def compare(label, path, outtype, d):
    parsed = npm_parse(path)
    if parsed is None:
        return
    kv, tensors = expected(d, outtype)
    md = parsed["metadata"]
    check(parsed["version"] == 3 and parsed["littleEndian"], "%s: version 3, little-endian" % label)
    check(set(md) == set(kv), "%s: metadata keys differ: extra %s, missing %s" %
          (label, sorted(set(md) - set(kv)), sorted(set(kv) - set(md))))
    for key, (t, sub, want) in kv.items():
        if key not in md:
            continue
        e = md[key]
        ok = e["type"] == t and (sub is None or e.get("subType") == sub) and same_value(t, sub, want, e["value"])
        shown = e["value"] if not isinstance(e["value"], list) else "%d items, first %s" % (len(e["value"]), e["value"][:4])
        check(ok, "%s: %s = %s (type %s/%s), expected %s (type %s/%s)" %
              (label, key, str(shown)[:200], e["type"], e.get("subType"), str(want)[:200], t, sub))
    # tensor directory
    got = {t["name"]: t for t in parsed["tensors"]}
    check(len(got) == len(parsed["tensors"]), "%s: duplicate tensor names" % label)
    check(set(got) == {n for n, _, _, _ in tensors}, "%s: tensor names differ: extra %s, missing %s" %
          (label, sorted(set(got) - {n for n, *_ in tensors}), sorted({n for n, *_ in tensors} - set(got))))
    data_start = int(parsed["tensorDataOffset"])
    size = os.path.getsize(path)
    check(data_start % 32 == 0, "%s: data section at %d is not 32-aligned" % (label, data_start))
    end = 0
    for t in parsed["tensors"]:  # in file order: back to back, aligned (ggml requires it)
        off = int(t["offset"])
        check(off == end, "%s: tensor %s at offset %d, expected %d" % (label, t["name"], off, end))
        end = off + (tensor_nbytes(t["dtype"], [int(s) for s in t["shape"]]) + 31) // 32 * 32
    check(data_start + end == size, "%s: file is %d bytes, tensors end at %d" % (label, size, data_start + end))
    with open(path, "rb") as f:
        blob = f.read()
    bad = 0
    for name, ne, ty, x in tensors:
        t = got.get(name)
        if t is None:
            continue
        shape = [int(s) for s in t["shape"]]
        ok = shape == ne and t["dtype"] == ty
        if ok:
            off = data_start + int(t["offset"])
            raw = blob[off:off + tensor_nbytes(ty, ne)]
            ok = raw == encode(np.asarray(x).reshape(-1), ty)
        if not ok:
            bad += 1
            check(False, "%s: tensor %s: shape %s type %d, expected %s type %d%s" %
                  (label, name, shape, t["dtype"], ne, ty, " (same shape and type, different bytes)"
                   if shape == ne and t["dtype"] == ty else ""))
    check(bad == 0, "%s: %d of %d tensors differ from the checkpoint (byte comparison)" % (label, bad, len(tensors)))
    print("%s: %d keys, %d tensors compared (%s)" % (label, len(kv), len(tensors), outtype))


def run(cmd):
    return subprocess.run(cmd, capture_output=True, text=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemmakit", required=True)
    args = ap.parse_args()
    if not os.path.exists(os.path.join(TOKENIZER_DIR, "tokenizer.json")):
        skip(TOKENIZER_DIR + "/tokenizer.json missing (scripts/fetch_tokenizer.sh)")
    ensure_npm()
    work = tempfile.mkdtemp(prefix="gk_gguf_e2e_")
    try:
        # Gemma 4 `tiny` (K=V full layer, 262144-token vocabulary, the real tokenizer).
        g4 = os.path.join(work, "tiny-g4")
        r = run([args.gemmakit, "init", "--preset", "tiny", "--out", g4, "--dtype", "bf16", "--seed", "3",
                 "--tokenizer-dir", TOKENIZER_DIR])
        if not check(r.returncode == 0, "gemmakit init: " + r.stderr.strip()):
            raise SystemExit(1)
        # Gemma 3 toy written here.
        g3 = os.path.join(work, "toy-g3")
        write_gemma3_toy(g3)
        for d in (g4, g3):
            for f in ("tokenizer.json", "tokenizer_config.json"):
                shutil.copy(os.path.join(TOKENIZER_DIR, f), os.path.join(d, f))
        for d, types in ((g4, ("bf16", "q8_0")), (g3, ("f16", "q8_0"))):
            for t in types:
                out = os.path.join(work, "%s-%s.gguf" % (os.path.basename(d), t))
                r = run([args.gemmakit, "convert", "--from", "hf", "--to", "gguf", "--in", d, "--out", out, "--gguf-type", t])
                if check(r.returncode == 0 and os.path.exists(out), "convert %s %s: %s" % (d, t, r.stderr.strip())):
                    compare("%s/%s" % (os.path.basename(d), t), out, t, d)
        # Unsupported pairs: one error line, status 1.
        r = run([args.gemmakit, "convert", "--from", "gguf", "--to", "hf", "--in", "x", "--out", "y"])
        check(r.returncode == 1 and r.stderr.count("\n") == 1 and "not supported yet" in r.stderr,
              "unsupported pair: rc %d, stderr %r" % (r.returncode, r.stderr))
        r = run([args.gemmakit, "convert", "--from", "hf", "--to", "gguf", "--in", os.path.join(work, "absent"),
                 "--out", os.path.join(work, "x.gguf")])
        check(r.returncode == 1 and r.stderr.startswith("gemmakit: error: ") and r.stderr.count("\n") == 1,
              "missing checkpoint: rc %d, stderr %r" % (r.returncode, r.stderr))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
