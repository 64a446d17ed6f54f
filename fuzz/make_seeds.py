#!/usr/bin/env python3
"""Writes the seed corpora of the libFuzzer targets: fuzz/corpus/<target>/seed-*.

    /usr/bin/python3 fuzz/make_seeds.py [--gemmakit build/gemmakit]

Seeds are small real inputs in each target's input format (docs/RELIABILITY.md): files written
here by hand after the formats' specs and gemmakit's own writers, and, with --gemmakit, the
OCDBT manifest, b-tree nodes and zarr metadata of a tiny Orbax checkpoint that `gemmakit convert`
writes from tests/oracle/make_checkpoint.py's g4_basic model. Files named regress-* are inputs
that crashed or aborted a parser once: those of issue 24's audit are written here when absent;
inputs a fuzzer finds are copied in by hand (docs/RELIABILITY.md).
Stdlib only (the Orbax part needs numpy, for make_checkpoint.py, and libzstd; the trained
tokenizer.model seed Debian's python3-sentencepiece, and is left as it is without it).
"""

import argparse
import math
import ctypes
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus")
ROOT = os.path.dirname(HERE)


def put(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def safetensors(tensors, metadata=None):
    """tensors: [(name, dtype, shape, raw bytes)] -> file bytes."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


def f32(*v):
    return struct.pack(f"<{len(v)}f", *v)


# ---- safetensors ----

def seeds_safetensors():
    put("safetensors_fuzz", "f32.safetensors",
        safetensors([("w", "F32", [2, 2], f32(1, 2, 3, 4)), ("b", "F32", [2], f32(0.5, -1))], {"format": "pt"}))
    put("safetensors_fuzz", "mixed.safetensors",
        safetensors([("h", "BF16", [3], b"\x80\x3f" * 3), ("i", "I64", [2], struct.pack("<2q", 7, -7)),
                     ("m", "U8", [0], b""), ("f", "F16", [1, 1], b"\x00\x3c"), ("e", "F8_E4M3", [2], b"\x38\x40")]))


# ---- GGUF ----

def gguf_string(s):
    s = s.encode()
    return struct.pack("<Q", len(s)) + s


def gguf_file():
    kv = []
    kv.append(gguf_string("general.architecture") + struct.pack("<I", 8) + gguf_string("gemma3"))
    kv.append(gguf_string("gemma3.context_length") + struct.pack("<I", 4) + struct.pack("<I", 128))
    kv.append(gguf_string("gemma3.attention.layer_norm_rms_epsilon") + struct.pack("<I", 6) + struct.pack("<f", 1e-6))
    tokens = ["<pad>", "<eos>", "<bos>", "a"]
    kv.append(gguf_string("tokenizer.ggml.tokens") + struct.pack("<I", 9) + struct.pack("<IQ", 8, len(tokens)) +
              b"".join(gguf_string(t) for t in tokens))
    kv.append(gguf_string("general.alignment") + struct.pack("<I", 4) + struct.pack("<I", 32))
    tensors = [("token_embd.weight", [4], 0, f32(1, 2, 3, 4)),      # F32, ne = [4]
               ("blk.0.attn_q.weight", [2, 2], 1, b"\x00\x3c" * 4)]  # F16, ne = [2, 2]
    infos, data = b"", b""
    for name, ne, t, raw in tensors:
        data += b"\0" * ((32 - len(data) % 32) % 32)
        infos += gguf_string(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", n) for n in ne)
        infos += struct.pack("<IQ", t, len(data))
        data += raw
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv)) + b"".join(kv) + infos
    head += b"\0" * ((32 - len(head) % 32) % 32)
    return head + data


def seeds_gguf():
    put("gguf_fuzz", "small.gguf", gguf_file())


# ---- tokenizer.model (SentencePiece ModelProto) ----

def pb_varint(v):
    out = b""
    while True:
        b, v = v & 0x7F, v >> 7
        out += bytes([b | (0x80 if v else 0)])
        if not v:
            return out


def pb_bytes(field, data):
    return pb_varint(field << 3 | 2) + pb_varint(len(data)) + data


def spm_piece(piece, score, piece_type):
    return pb_bytes(1, piece.encode()) + pb_varint(2 << 3 | 5) + struct.pack("<f", score) + pb_varint(3 << 3) + pb_varint(piece_type)


def seeds_sentencepiece():
    """A ModelProto by hand (trainer spec, every piece type), and one trained by sentencepiece."""
    pieces = [("<unk>", 0.0, 2), ("<s>", 0.0, 3), ("</s>", 0.0, 3), ("<start_of_turn>", 0.0, 4), ("<unused0>", 0.0, 5),
              ("<0x0A>", 0.0, 6), ("\u2581the", -3.25, 1), ("\u65e5\u672c", -7.5, 1)]
    model = pb_bytes(2, pb_bytes(1, b"corpus.txt")) + b"".join(pb_bytes(1, spm_piece(*p)) for p in pieces)
    put("sentencepiece_model_fuzz", "handmade.model", model + pb_bytes(3, pb_bytes(1, b"identity")))
    try:
        import io
        import sentencepiece  # Debian python3-sentencepiece
    except ImportError:
        print("seeds_sentencepiece: no sentencepiece module, the trained seed is left as it is")
        return
    words = "module top input clk output reg always posedge assign endmodule".split()
    lines = [" ".join(words[(i * 7 + j * 3) % len(words)] for j in range(9)) for i in range(60)]
    out = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=out, vocab_size=60,
                                             model_type="bpe", normalization_rule_name="identity",
                                             control_symbols=["<ctrl>"], minloglevel=2)
    put("sentencepiece_model_fuzz", "trained-bpe.model", out.getvalue())


# ---- zarr (metadata NUL chunk bytes; byte 0 odd = zarr v3) ----

def seeds_zarr_handmade():
    v2 = {"chunks": [2, 2], "compressor": None, "dtype": "<f4", "fill_value": 0.0, "filters": None,
          "order": "C", "shape": [3, 2], "zarr_format": 2}
    put("orbax_zarr_fuzz", "v2.bin", b"\x00" + json.dumps(v2).encode() + b"\x00" + f32(1, 2, 3, 4))
    v3 = {"zarr_format": 3, "node_type": "array", "shape": [2, 2], "data_type": "bfloat16",
          "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 2]}},
          "chunk_key_encoding": {"name": "default"}, "fill_value": 0,
          "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}
    put("orbax_zarr_fuzz", "v3.bin", b"\x01" + json.dumps(v3).encode() + b"\x00" + b"\x80\x3f" * 4)


# ---- Orbax checkpoint written by gemmakit: OCDBT objects and zarr metadata ----

MANIFEST_MAGIC = struct.pack(">I", 0x0cdb3a2a)
NODE_MAGIC = struct.pack(">I", 0x0cdb20de)


def zstd_decompress(data):
    lib = ctypes.CDLL("libzstd.so.1")
    lib.ZSTD_getFrameContentSize.restype = ctypes.c_ulonglong
    lib.ZSTD_decompress.restype = ctypes.c_size_t
    n = lib.ZSTD_getFrameContentSize(data, ctypes.c_size_t(len(data)))
    if n >= (1 << 63):
        raise ValueError("zstd frame without a content size")
    out = ctypes.create_string_buffer(max(int(n), 1))
    got = lib.ZSTD_decompress(out, ctypes.c_size_t(int(n)), data, ctypes.c_size_t(len(data)))
    if lib.ZSTD_isError(ctypes.c_size_t(got)):
        raise ValueError("zstd error")
    return out.raw[:got]


def envelope_body(env):
    # magic(4) length(8) version varint(=0) compression varint(0|1) body crc32c(4)
    compression = env[13]
    body = env[14:-4]
    return zstd_decompress(body) if compression == 1 else body


def json_objects_ending_with(data, needle):
    """The JSON objects in `data` whose text ends with `needle` + value + '}' (brace matching
    backwards from that '}')."""
    out, i = [], 0
    while (k := data.find(needle, i)) >= 0:
        i = k + len(needle)
        end = data.find(b"}", k) + 1
        depth, j = 0, end
        while j > 0:
            j -= 1
            depth += {ord("}"): 1, ord("{"): -1}.get(data[j], 0)
            if depth == 0:
                break
        try:
            out.append((json.loads(data[j:end]), data[j:end]))
        except ValueError:
            pass
    return out


def seeds_orbax(gemmakit):
    tmp = tempfile.mkdtemp()
    try:
        model = os.path.join(tmp, "model")
        subprocess.run([sys.executable, os.path.join(ROOT, "tests", "oracle", "make_checkpoint.py"), "--case",
                        "g4_basic", "--out", model], check=True, stdout=subprocess.DEVNULL)
        orb = os.path.join(tmp, "orbax")
        subprocess.run([gemmakit, "convert", "--from", "hf", "--to", "orbax", "--in", model, "--out", orb],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        item = os.path.join(orb, "0", "model_params")
        with open(os.path.join(item, "manifest.ocdbt"), "rb") as f:
            manifest = f.read()
        put("orbax_ocdbt_fuzz", "manifest-whole.bin", b"\x04" + manifest)
        put("orbax_ocdbt_fuzz", "manifest-body.bin", b"\x00" + envelope_body(manifest))
        nodes = []
        for name in sorted(os.listdir(os.path.join(item, "d"))):
            with open(os.path.join(item, "d", name), "rb") as f:
                blob = f.read()
            i = 0
            while (i := blob.find(NODE_MAGIC, i)) >= 0:
                length = struct.unpack("<Q", blob[i + 4:i + 12])[0]
                if 16 <= length <= len(blob) - i:
                    nodes.append(blob[i:i + length])
                i += 4
        nodes.sort(key=len)
        for n, env in enumerate(nodes[:3]):
            put("orbax_ocdbt_fuzz", f"node{n}-whole.bin", b"\x05" + env)
            body = envelope_body(env)
            put("orbax_ocdbt_fuzz", f"node{n}-body.bin", b"\x02" + body)
            # The two smallest arrays' zarr.json (sharded, zstd), with a chunk value of zeros.
            metas = sorted(json_objects_ending_with(body, b'"zarr_format"'),
                           key=lambda m: math.prod(m[0].get("shape") or [1]))
            for m, (meta, text) in enumerate(metas[:2]):
                fmt = meta.get("zarr_format")
                put("orbax_zarr_fuzz", f"orbax-node{n}-{m}.bin", bytes([1 if fmt == 3 else 0]) + text + b"\x00" + b"\0" * 64)
    finally:
        shutil.rmtree(tmp)


# ---- config.json, tokenizer.json, chat template ----

TINY_G4 = {"model_type": "gemma4_text", "architectures": ["Gemma4ForCausalLM"], "vocab_size": 32, "hidden_size": 8,
           "intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
           "head_dim": 4, "global_head_dim": 4, "sliding_window": 4,
           "layer_types": ["sliding_attention", "full_attention"], "max_position_embeddings": 64}


def seeds_config():
    put("config_json_fuzz", "g4-tiny.json", json.dumps(TINY_G4))
    g4 = {"model_type": "gemma4", "architectures": ["Gemma4ForConditionalGeneration"], "eos_token_id": [1, 106],
          "text_config": dict(TINY_G4, num_kv_shared_layers=1, attention_k_eq_v=True, num_global_key_value_heads=1,
                              hidden_size_per_layer_input=4, use_double_wide_mlp=True,
                              rope_parameters={"full_attention": {"rope_type": "proportional", "rope_theta": 1e6,
                                                                  "partial_rotary_factor": 0.25},
                                               "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}},
                              final_logit_softcapping=30.0, enable_moe_block=True, num_experts=4, top_k_experts=2,
                              moe_intermediate_size=8)}
    put("config_json_fuzz", "g4-multimodal-moe.json", json.dumps(g4))
    per_layer = dict(TINY_G4, per_layer_config={"1": {"head_dim": 8, "num_key_value_heads": 1}})
    per_layer.pop("global_head_dim")
    put("config_json_fuzz", "g4-per-layer.json", json.dumps(per_layer))
    g3 = {"model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"], "vocab_size": 32, "hidden_size": 8,
          "intermediate_size": 16, "num_hidden_layers": 3, "num_attention_heads": 2, "num_key_value_heads": 1,
          "head_dim": 4, "sliding_window": 4, "sliding_window_pattern": 2, "query_pre_attn_scalar": 4,
          "rope_theta": 1e6, "rope_local_base_freq": 1e4, "rope_scaling": {"rope_type": "linear", "factor": 8.0},
          "final_logit_softcapping": None, "torch_dtype": "bfloat16"}
    put("config_json_fuzz", "g3.json", json.dumps(g3))


META = "\u2581"


def tokenizer_json(gemma_pipeline=False):
    vocab = {p: i for i, p in enumerate(["<pad>", "<eos>", "<bos>", "<unk>"])}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for p in [META, "a", "b", "h", "e", "l", "o", "\n", "he", "ll", "hell", "hello", META + "hello", "ab"]:
        vocab[p] = len(vocab)
    added = [{"id": vocab[p], "content": p, "special": True, "lstrip": False, "rstrip": False, "normalized": False,
              "single_word": False} for p in ["<pad>", "<eos>", "<bos>", "<unk>"]]
    added.append({"id": 300, "content": "<|turn>", "special": True})
    added.append({"id": 301, "content": "\n\n", "special": False})
    model = {"type": "BPE", "unk_token": "<unk>", "byte_fallback": True, "fuse_unk": True, "vocab": vocab,
             "merges": ["l l", "h e", "he ll", ["hell", "o"], [META, "hello"], "a b"]}
    if gemma_pipeline:  # Prepend + Replace normalizer, Metaspace pre-tokenizer, Strip decoder
        return {"version": "1.0", "added_tokens": added,
                "normalizer": {"type": "Sequence", "normalizers": [
                    {"type": "Prepend", "prepend": META},
                    {"type": "Replace", "pattern": {"String": " "}, "content": META}]},
                "pre_tokenizer": {"type": "Metaspace", "replacement": META, "prepend_scheme": "first", "split": False},
                "decoder": {"type": "Sequence", "decoders": [
                    {"type": "Replace", "pattern": {"String": META}, "content": " "},
                    {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
                "model": model}
    return {"version": "1.0", "added_tokens": added,
            "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": META},
            "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "MergedWithPrevious",
                              "invert": False},
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": META}, "content": " "},
                {"type": "ByteFallback"}, {"type": "Fuse"}]},
            "model": model}


def seeds_tokenizer():
    put("tokenizer_json_fuzz", "small.json", json.dumps(tokenizer_json(), ensure_ascii=False))
    put("tokenizer_json_fuzz", "gemma-pipeline.json", json.dumps(tokenizer_json(True), ensure_ascii=False))
    for name, mode, text in [("hello", 1, "hello world"), ("specials", 0, "<bos>hi<|turn>\n\nab"),
                             ("utf8", 1, "h\u00e9llo \u4e16\u754c \U0001F600"), ("bytes", 2, b"\xff\xfe\xc3")]:
        put("tokenizer_encode_fuzz", name + ".bin", bytes([mode]) + (text if isinstance(text, bytes) else text.encode()))


def seeds_chat_template():
    conv = [("system", "You are terse."), ("user", "Write a mux <|turn> please"),
            ("assistant", "<|channel>thought\nhmm<channel|>module mux;"), ("user", "thanks")]
    body = b"\x00".join(r.encode() + b"\x00" + c.encode() for r, c in conv)
    put("chat_template_fuzz", "conversation.bin", b"\x05" + body)
    put("chat_template_fuzz", "one-user.bin", b"\x03" + b"user\x00hello")


def seeds_jinja():
    """Template NUL context: gemmakit's own init template, and small templates that move context
    strings through each kind of operation (filters, methods, slicing, macros, block set) with no
    backslash, '%' or format() in them, so the target's provenance check applies."""
    src = open(os.path.join(ROOT, "src", "formats", "gemma4_tokens.cc"), encoding="utf-8").read()
    init = src[src.index('R"JINJA(') + len('R"JINJA('):src.index(')JINJA"')]
    put("jinja_template_fuzz", "init-template.bin", init)
    context = json.dumps({
        "messages": [{"role": "user", "content": "hi <|turn>"}, {"role": "assistant", "content": "ok"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
        "add_generation_prompt": True, "bos_token": "<bos>"})
    put("jinja_template_fuzz", "init-template-context.bin", init + "\0" + context)
    templates = {
        "turns": "{{ bos_token }}{% for m in messages %}<|turn>{{ m.role }}\n{{ m.content | trim }}<turn|>\n"
                 "{% endfor %}{% if add_generation_prompt %}<|turn>model\n{% endif %}",
        "filters": "{{ messages | map(attribute='content') | join(', ') }}|{{ messages[1].content | upper | "
                   "replace('A', 'b') | indent(2, true) | title | capitalize | e | trim | reverse | list | join('|') }}",
        "json": "{{ messages | tojson }}{{ tools | string }}{{ tools[0].function | dictsort }}"
                "{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content') | first }}",
        "methods": "{% for k, v in messages[0].items() %}{{ k }}={{ v }};{% endfor %}{{ messages[0].content.split(' ') }}"
                   "{{ 'Q'.join(messages[0].content) }}{{ messages[0].content.startswith('h') }}"
                   "{{ messages[0].content.replace(messages[0].content[0], 'Q') | list }}",
        "slices": "{{ (messages[0].content ~ 'x')[1:] }}{{ messages[0]['content'][::-1] }}"
                  "{{ messages[0].content | unique | list }}{{ dict(a=messages[0].content) | items | list }}",
        "macros": "{% macro say(x, sep='-') %}[{{ x }}{{ sep }}{{ varargs | join }}{{ kwargs }}]{% endmacro %}"
                  "{% for m in messages %}{{ say(m.content) }}{{ say(m.role, m.content, 1, k=m.content) }}{% endfor %}",
        "sequences": "{{ messages | sort(attribute='role') | map(attribute='content') | list }}"
                     "{{ messages | map(attribute='content') | select('string') | unique | list | max }}"
                     "{{ messages[0].content.rstrip('.') }}{{ messages[0].content.split(' ', 1) }}"
                     "{{ messages[0].content.splitlines() }}{{ tools[0] | dictsort | first | last }}",
        "block-set": "{% set ns = namespace(out='') %}{% set x %}{{ messages[0].content }}{% endset %}"
                     "{% for m in messages %}{% set ns.out = ns.out ~ m.content ~ loop.index %}{% endfor %}"
                     "{{ x }}{{ ns.out }}{{ ns }}{{ x | length }}{% set d = {messages[0].content: 1} %}{{ d }}",
        "errors": "{% if messages | length > 1 %}{{ raise_exception(messages[0].content) }}{% endif %}",
    }
    for name, t in templates.items():
        put("jinja_template_fuzz", name + ".bin", t)
    put("jinja_template_fuzz", "turns-context.bin", templates["turns"] + "\0" + context)


# ---- OpenAI request bodies ----

def seeds_openai():
    chat = {"model": "tiny", "messages": [{"role": "system", "content": "be brief"},
                                          {"role": "user", "content": [{"type": "text", "text": "hi"}, "there"]}],
            "max_completion_tokens": 16, "temperature": 0.7, "top_p": 0.9, "top_k": 40, "seed": 3, "n": 2,
            "stop": ["\n\n"], "logprobs": True, "top_logprobs": 2, "stream": True,
            "stream_options": {"include_usage": True}, "chat_template_kwargs": {"enable_thinking": True},
            "presence_penalty": 0, "user": "u1", "unknown_field": 1}
    put("openai_chat_fuzz", "full.json", json.dumps(chat))
    put("openai_chat_fuzz", "minimal.json", '{"messages":[{"role":"user","content":"hello"}]}')
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather",
              "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["a", "b"]},
                                                              "days": {"type": "integer"},
                                                              "opts": {"type": "array", "items": {"type": "object"}}},
                             "required": ["city"]}}}]
    put("openai_chat_fuzz", "tools.json", json.dumps({
        "messages": [{"role": "system", "content": "Use tools."},
                     {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
                     {"role": "assistant", "content": None, "reasoning_content": "Call it.",
                      "tool_calls": [{"id": "call_1", "type": "function",
                                      "function": {"name": "get_weather", "arguments": "{\"city\": \"a\", \"days\": 2}"}}]},
                     {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}],
        "tools": tools, "tool_choice": "auto", "chat_template_kwargs": {"enable_thinking": True},
        "include_reasoning": False}))
    comp = {"model": "tiny", "prompt": ["a", "b"], "max_tokens": 8, "logprobs": 3, "echo": False,
            "stop_token_ids": [1, 106], "min_tokens": 1, "ignore_eos": True, "truncate_prompt_tokens": 4,
            "include_stop_str_in_output": True, "skip_special_tokens": False, "cache_salt": "s"}
    put("openai_completions_fuzz", "list.json", json.dumps(comp))
    put("openai_completions_fuzz", "tokens.json", '{"prompt":[[2,10,11],[2,12]],"max_tokens":1.0,"seed":-1}')
    put("openai_tokenize_fuzz", "prompt.json", '{"model":"tiny","prompt":"hello <bos>","add_special_tokens":true}')
    put("openai_tokenize_fuzz", "messages.json",
        '{"messages":[{"role":"user","content":"hi"}],"add_generation_prompt":true,'
        '"chat_template_kwargs":{"enable_thinking":false}}')
    put("openai_tokenize_fuzz", "detokenize.json", '{"model":"tiny","tokens":[2,270,271,1000,99999]}')


# ---- recipes ----

def seeds_recipe():
    for name in sorted(os.listdir(os.path.join(ROOT, "recipes"))):
        with open(os.path.join(ROOT, "recipes", name), "rb") as f:
            put("recipe_toml_fuzz", name, f.read())
    put("recipe_toml_fuzz", "overrides.txt", "lora.rank=8\noptim.learning_rate=2e-4\ndata=x.jsonl\nmemory.remat=false\n")


# ---- PEFT adapters (adapter_config.json NUL adapter_model.safetensors) for TINY_G4 ----

def seeds_peft():
    r = 2
    prefix = "base_model.model.model.language_model.layers."
    # (module, in, out) of the tiny config: hidden 8, 2 heads x 4, 1 KV head x 4, MLP 16.
    shapes = {"self_attn.q_proj": (8, 8), "self_attn.k_proj": (8, 4), "self_attn.v_proj": (8, 4),
              "self_attn.o_proj": (8, 8), "mlp.gate_proj": (8, 16), "mlp.up_proj": (8, 16), "mlp.down_proj": (16, 8)}
    for name, modules, dtype in [("qv-f32", ["self_attn.q_proj", "self_attn.v_proj"], "F32"),
                                 ("all-bf16", list(shapes), "BF16")]:
        tensors = []
        for layer in range(2):
            for m in modules:
                i, o = shapes[m]
                size = 4 if dtype == "F32" else 2
                tensors.append((f"{prefix}{layer}.{m}.lora_A.weight", dtype, [r, i], b"\x01" * (size * r * i)))
                tensors.append((f"{prefix}{layer}.{m}.lora_B.weight", dtype, [o, r], b"\x02" * (size * o * r)))
        config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": r, "lora_alpha": 4, "lora_dropout": 0.0,
                  "target_modules": [m.split(".")[1] for m in modules], "use_rslora": name == "all-bf16",
                  "use_dora": False, "rank_pattern": {}, "alpha_pattern": {}}
        put("peft_adapter_fuzz", name + ".bin",
            json.dumps(config).encode() + b"\x00" + safetensors(tensors, {"format": "pt"}))


# ---- token data sets (dataset.json NUL shard-00000.safetensors) ----

def seeds_token_dataset():
    rows = [([2, 10, 11, 12], [0, 0, 1, 1]), ([2, 13], [0, 1]), ([2, 14, 15], [0, 1, 0])]
    tokens = [t for r in rows for t in r[0]]
    mask = [m for r in rows for m in r[1]]
    offsets = [0]
    for r in rows:
        offsets.append(offsets[-1] + len(r[0]))
    shard = safetensors([("tokens", "I32", [len(tokens)], struct.pack(f"<{len(tokens)}i", *tokens)),
                         ("loss_mask", "U8", [len(mask)], bytes(mask)),
                         ("offsets", "I64", [len(offsets)], struct.pack(f"<{len(offsets)}q", *offsets))],
                        {"format": "gemmakit-token-dataset"})
    index = {"format": "gemmakit-token-dataset", "version": 1, "rows": len(rows), "tokens": len(tokens),
             "loss_tokens": sum(mask), "shards": [{"file": "shard-00000.safetensors", "rows": len(rows)}],
             "meta": {"source": "seed", "max_seq_len": 8, "loss": "assistant"}}
    put("token_dataset_fuzz", "three-rows.bin", json.dumps(index).encode() + b"\x00" + shard)


# ---- regressions: inputs that aborted gemmakit or were undefined behaviour before issue 24 ----

def regress(target, name, data):
    path = os.path.join(CORPUS, target, "regress-" + name)
    if not os.path.exists(path):
        with open(path, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)


def regressions():
    h = b'{"x":{"dtype":"F32","shape":[1e999],"data_offsets":[0,4]}}'
    # nlohmann's out_of_range.406, uncaught: SIGABRT (the crafted file).
    regress("safetensors_fuzz", "number-overflow.safetensors", struct.pack("<Q", len(h)) + h + b"\0" * 4)
    # float -> int cast of 1e300 (undefined behaviour); a layer count that allocated gigabytes.
    regress("config_json_fuzz", "float-for-int.json", json.dumps(dict(TINY_G4, hidden_size=1e300)))
    regress("config_json_fuzz", "huge-layer-count.json",
            json.dumps({k: v for k, v in dict(TINY_G4, num_hidden_layers=2000000000).items() if k != "layer_types"}))
    # value() on a non-string peft_type threw type_error; r = 2e9 allocated ~r x (in + out) floats.
    regress("peft_adapter_fuzz", "peft-type-number.bin", b'{"peft_type": 5, "r": 2, "lora_alpha": 4}\0')
    regress("peft_adapter_fuzz", "huge-rank.bin", b'{"r": 2000000000, "lora_alpha": 4}\0')
    # A --set value that is not UTF-8: the error message's JSON quoting threw type_error.316.
    regress("recipe_toml_fuzz", "set-invalid-utf8.txt", b"lora.rank=\xff\n")


def seeds_hostile():
    """Inputs of the same kinds that were already refused cleanly: kept as seeds."""
    h = b'{"x":{"dtype":"F32","shape":' + b"[" * 600 + b"]" * 600 + b',"data_offsets":[0,4]}}'
    put("safetensors_fuzz", "deep-nesting.safetensors", struct.pack("<Q", len(h)) + h + b"\0" * 4)
    put("tokenizer_json_fuzz", "number-overflow.json", '{"model": {"type": "BPE", "vocab": {"a": 1e999}}}')
    put("openai_chat_fuzz", "number-overflow.json", '{"messages": [{"role": "user", "content": "x"}], "seed": 1e999}')
    put("openai_completions_fuzz", "number-overflow.json", '{"prompt": "a", "max_tokens": -1e400}')
    put("openai_tokenize_fuzz", "number-overflow.json", '{"tokens": [1e999]}')
    put("token_dataset_fuzz", "number-overflow.bin", b'{"format": "gemmakit-token-dataset", "version": 1, "rows": 1e999}\0')
    put("orbax_zarr_fuzz", "number-overflow.bin", b'\x01{"zarr_format":3,"shape":[1e999]}\0')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemmakit", help="a gemmakit binary: adds seeds from a tiny Orbax checkpoint it writes")
    a = ap.parse_args()
    seeds_safetensors()
    seeds_gguf()
    seeds_sentencepiece()
    seeds_zarr_handmade()
    if a.gemmakit:
        seeds_orbax(a.gemmakit)
    seeds_config()
    seeds_tokenizer()
    seeds_chat_template()
    seeds_jinja()
    seeds_openai()
    seeds_recipe()
    seeds_peft()
    seeds_token_dataset()
    seeds_hostile()
    regressions()
    for t in sorted(os.listdir(CORPUS)):
        files = os.listdir(os.path.join(CORPUS, t))
        size = sum(os.path.getsize(os.path.join(CORPUS, t, f)) for f in files)
        print(f"{t}: {len(files)} files, {size} bytes")


if __name__ == "__main__":
    main()
