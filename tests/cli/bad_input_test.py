#!/usr/bin/env python3
"""Bad input to the gemmakit binary: each case must print exactly one line on stderr
("gemmakit: error: ..."), exit with status 1, and never crash or hang.

    bad_input_test.py --gemmakit build/gemmakit

Checkpoints are written by tests/oracle/make_checkpoint.py (numpy only), then damaged.
"""

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
MAKE_CHECKPOINT = os.path.join(HERE, "..", "oracle", "make_checkpoint.py")


def make_model(root, name, dtype="f32"):
    out = os.path.join(root, name)
    subprocess.run([sys.executable, MAKE_CHECKPOINT, "--case", "g4_basic", "--out", out,
                    "--dtype", dtype], check=True, stdout=subprocess.DEVNULL)
    return out


def read_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    return header, data


def write_with_header(path, header, data):
    raw = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        f.write(data)


def first_tensor(header):
    return next(k for k in header if k != "__metadata__")


# Each case: (name, damage(model_dir) -> None, extra args, text that must appear in the error).
def truncate(d):
    p = os.path.join(d, "model.safetensors")
    size = os.path.getsize(p)
    with open(p, "r+b") as f:
        f.truncate(size // 2)


def header_past_end(d):
    p = os.path.join(d, "model.safetensors")
    with open(p, "r+b") as f:
        f.write(struct.pack("<Q", 1 << 40))


def overlapping(d):
    p = os.path.join(d, "model.safetensors")
    h, data = read_header(p)
    names = sorted((k for k in h if k != "__metadata__"), key=lambda k: h[k]["data_offsets"][0])
    a, b = names[0], names[1]
    # Point b at a's bytes when b is no larger than a: same size, overlapping range.
    for x, y in [(a, b), (b, a)]:
        lx = h[x]["data_offsets"][1] - h[x]["data_offsets"][0]
        ly = h[y]["data_offsets"][1] - h[y]["data_offsets"][0]
        if ly <= lx and ly > 0:
            start = h[x]["data_offsets"][0]
            h[y]["data_offsets"] = [start, start + ly]
            break
    write_with_header(p, h, data)


def offsets_out_of_range(d):
    p = os.path.join(d, "model.safetensors")
    h, data = read_header(p)
    k = first_tensor(h)
    begin, end = h[k]["data_offsets"]
    h[k]["data_offsets"] = [begin + len(data), end + len(data)]
    write_with_header(p, h, data)


def dtype_shape_mismatch(d):
    p = os.path.join(d, "model.safetensors")
    h, data = read_header(p)
    k = first_tensor(h)
    h[k]["shape"] = [s * 2 for s in h[k]["shape"]] or [2]
    write_with_header(p, h, data)


def edit_config(d, fn):
    p = os.path.join(d, "config.json")
    with open(p) as f:
        c = json.load(f)
    fn(c)
    with open(p, "w") as f:
        json.dump(c, f)


def missing_field(d):
    edit_config(d, lambda c: c["text_config"].pop("hidden_size"))


def unknown_arch(d):
    def fn(c):
        c["model_type"] = "llama"
        c["text_config"]["model_type"] = "llama"
        c["architectures"] = ["LlamaForCausalLM"]
    edit_config(d, fn)


def short_context(d):
    edit_config(d, lambda c: c["text_config"].__setitem__("max_position_embeddings", 8))


def no_config(d):
    os.remove(os.path.join(d, "config.json"))


def invalid_json_config(d):
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write("{not json")


def wrong_shape_in_config(d):
    edit_config(d, lambda c: c["text_config"].__setitem__("intermediate_size", 256))


def unknown_override(d):
    def fn(c):
        t = c["text_config"]
        t.pop("global_head_dim", None)
        t.pop("num_global_key_value_heads", None)
        t["per_layer_config"] = {"5": {"head_dim": 64, "rope_theta": 5.0}}
    edit_config(d, fn)


TOKENS = ["--tokens", "2,10,11,12,13,14,15,16,17,18,19,20"]
CASES = [
    ("truncated safetensors", truncate, TOKENS, "safetensors"),
    ("header length past the end", header_past_end, TOKENS, "header"),
    ("overlapping offsets", overlapping, TOKENS, "overlap"),
    ("offsets out of range", offsets_out_of_range, TOKENS, "past the end"),
    ("dtype/shape size mismatch", dtype_shape_mismatch, TOKENS, "shape"),
    ("config missing a required field", missing_field, TOKENS, "hidden_size"),
    ("unknown architecture", unknown_arch, TOKENS, "unknown architecture"),
    ("config.json missing", no_config, TOKENS, "config.json"),
    ("config.json not JSON", invalid_json_config, TOKENS, "invalid JSON"),
    ("tensor shape disagrees with config", wrong_shape_in_config, TOKENS, "mlp.gate_proj.weight has shape"),
    ("per_layer_config override gemmakit does not apply", unknown_override, TOKENS,
     "per_layer_config layer 5: override 'rope_theta'"),
    ("prompt longer than the context", short_context, TOKENS, "longer than the model's context"),
    ("token id outside the embedding", None, ["--tokens", "2,5,999999"], "outside"),
    ("malformed token list", None, ["--tokens", "2,x,3"], "not a token id"),
    ("model directory without weights", "no_weights", TOKENS, "no model.safetensors"),
]


def run_case(gk, root, base, name, damage, args, needle):
    d = os.path.join(root, name.replace(" ", "_").replace("/", "_"))
    if damage == "no_weights":
        os.makedirs(d)
        shutil.copy(os.path.join(base, "config.json"), d)
    else:
        shutil.copytree(base, d)
        if damage:
            damage(d)
    cmd = [gk, "logprobs", "--model", d, "--json"] + args
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return f"hung (no exit within 60 s): {' '.join(cmd)}"
    err_lines = [l for l in p.stderr.splitlines() if l.strip()]
    problems = []
    if p.returncode != 1:
        problems.append(f"exit status {p.returncode}, expected 1")
    if len(err_lines) != 1:
        problems.append(f"{len(err_lines)} stderr lines, expected 1: {p.stderr!r}")
    elif not err_lines[0].startswith("gemmakit: error: "):
        problems.append(f"stderr does not start with 'gemmakit: error: ': {err_lines[0]!r}")
    if needle.lower() not in p.stderr.lower():
        problems.append(f"error does not mention {needle!r}: {p.stderr.strip()!r}")
    if p.stdout.strip():
        problems.append(f"unexpected stdout: {p.stdout[:200]!r}")
    return "; ".join(problems)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemmakit", required=True)
    a = ap.parse_args()
    failed = 0
    with tempfile.TemporaryDirectory() as root:
        base = make_model(root, "base")
        # The undamaged model must work, or every case would pass for the wrong reason.
        ok = subprocess.run([a.gemmakit, "logprobs", "--model", base, "--json"] + TOKENS,
                            capture_output=True, text=True, timeout=60)
        if ok.returncode != 0:
            print(f"FAIL baseline: {ok.stderr.strip()}")
            return 1
        for name, damage, args, needle in CASES:
            problem = run_case(a.gemmakit, root, base, name, damage, args, needle)
            print(f"{'FAIL' if problem else 'ok  '} {name}{': ' + problem if problem else ''}")
            failed += bool(problem)
    print(f"{len(CASES) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
