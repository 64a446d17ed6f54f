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


# Crafted files (issue 24): every parser of outside input answers with one error line, never an
# uncaught exception (SIGABRT, exit 134) or a stack overflow (SIGSEGV).
def number_too_large(d):
    """A safetensors header holding a number too large for a double (nlohmann throws)."""
    p = os.path.join(d, "model.safetensors")
    h, data = read_header(p)
    k = first_tensor(h)
    raw = json.dumps(h).replace(json.dumps(h[k]["shape"]), "[1e999]", 1).encode()
    with open(p, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + data)


def deeply_nested_header(d):
    p = os.path.join(d, "model.safetensors")
    h, data = read_header(p)
    k = first_tensor(h)
    raw = json.dumps(h).replace(json.dumps(h[k]["shape"]), "[" * 200000 + "]" * 200000, 1).encode()
    with open(p, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw + data)


def tensor_name_with_newline(d):
    p = os.path.join(d, "model.safetensors")
    h, data = read_header(p)
    h["extra\nline"] = {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}
    write_with_header(p, h, data)


def config_number_too_large(d):
    with open(os.path.join(d, "config.json")) as f:
        text = f.read()
    with open(os.path.join(d, "config.json"), "w") as f:
        f.write(text.replace('"vocab_size": ', '"vocab_size": 1e999, "x": ', 1))


def config_float_for_int(d):
    edit_config(d, lambda c: c["text_config"].__setitem__("hidden_size", 1e300))


def bad_tokenizer(d):
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        f.write('{"model": {"type": "BPE", "vocab": {"a": 1e999}}}')


def replaced_by(target, name):
    """A checkpoint from the internet may hold symlinks: one to a device would be read forever."""
    def damage(d):
        path = os.path.join(d, name)
        if os.path.lexists(path):
            os.remove(path)
        if target == "directory":
            os.makedirs(path)
        else:
            os.symlink(target, path)
    return damage


TOKENS = ["--tokens", "2,10,11,12,13,14,15,16,17,18,19,20"]
CASES = [
    # No usable GPU here (no CUDA build, no device, or the runner not written yet): one line.
    ("--device cuda without a usable GPU", None, TOKENS + ["--device", "cuda"], "--device cuda:0: "),
    ("--device not a device", None, TOKENS + ["--device", "gpu"], "is not cpu, cuda or cuda:N"),
    ("truncated safetensors", truncate, TOKENS, "safetensors"),
    ("header length past the end", header_past_end, TOKENS, "header"),
    ("overlapping offsets", overlapping, TOKENS, "overlap"),
    ("offsets out of range", offsets_out_of_range, TOKENS, "past the end"),
    ("dtype/shape size mismatch", dtype_shape_mismatch, TOKENS, "shape"),
    ("config missing a required field", missing_field, TOKENS, "hidden_size"),
    ("unknown architecture", unknown_arch, TOKENS, "unknown architecture"),
    ("config.json missing", no_config, TOKENS, "config.json"),
    ("config.json not JSON", invalid_json_config, TOKENS, "config.json: not valid JSON"),
    ("tensor shape disagrees with config", wrong_shape_in_config, TOKENS, "mlp.gate_proj.weight has shape"),
    ("per_layer_config override gemmakit does not apply", unknown_override, TOKENS,
     "per_layer_config layer 5: override 'rope_theta'"),
    ("prompt longer than the context", short_context, TOKENS, "longer than the model's context"),
    ("token id outside the embedding", None, ["--tokens", "2,5,999999"], "outside"),
    ("malformed token list", None, ["--tokens", "2,x,3"], "not a token id"),
    ("model directory without weights", "no_weights", TOKENS, "no model.safetensors"),
    ("safetensors header number too large for a double", number_too_large, TOKENS,
     "header: not valid JSON: number overflow parsing '1e999'"),
    ("safetensors header nested 200000 deep", deeply_nested_header, TOKENS, "nesting deeper than 512 levels"),
    ("tensor name with a newline", tensor_name_with_newline, TOKENS, "extra\\nline"),
    # Found by config_json_fuzz: errors quote input verbatim; Fail prints them on one line.
    ("config.json model_type with a newline", lambda d: edit_config(d, lambda c: c["text_config"].__setitem__(
        "model_type", "g\ne")), TOKENS, "unknown architecture (model_type 'g\\ne'"),
    ("config.json number too large for a double", config_number_too_large, TOKENS,
     "config.json: not valid JSON: number overflow"),
    ("config.json float for an integer field", config_float_for_int, TOKENS,
     "field 'hidden_size' has the wrong type or is out of range"),
    ("tokenizer.json number too large for a double", bad_tokenizer, ["--text", "hi"],
     "tokenizer.json: not valid JSON: number overflow"),
    ("config.json a symlink to /dev/zero", replaced_by("/dev/zero", "config.json"), TOKENS,
     "config.json: it is a device, not a file"),
    ("config.json a directory", replaced_by("directory", "config.json"), TOKENS, "config.json: it is a directory"),
    ("tokenizer.json a symlink to /dev/urandom", replaced_by("/dev/urandom", "tokenizer.json"), ["--text", "hi"],
     "tokenizer.json: it is a device, not a file"),
    ("model.safetensors a symlink to /dev/zero", replaced_by("/dev/zero", "model.safetensors"), TOKENS,
     "model.safetensors: not a regular file"),
]


# Other commands' inputs: (name, make(root, model_dir) -> gemmakit arguments, text of the error).
def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


def adapter_bad_json(root, model):
    a = os.path.join(root, "adapter_bad_json")
    write(os.path.join(a, "adapter_config.json"), '{"r": 8, "lora_alpha": 1e999}')
    return ["merge", "--base", model, "--adapter", a, "--out", os.path.join(root, "merged1")]


def adapter_bad_type(root, model):
    a = os.path.join(root, "adapter_bad_type")
    write(os.path.join(a, "adapter_config.json"), '{"r": 8, "lora_alpha": 16, "peft_type": {"x": 1}}')
    return ["merge", "--base", model, "--adapter", a, "--out", os.path.join(root, "merged2")]


def adapter_bad_tensors(root, model):
    a = os.path.join(root, "adapter_bad_tensors")
    write(os.path.join(a, "adapter_config.json"), '{"r": 8, "lora_alpha": 16}')
    h = b'{"base_model.model.x.lora_A.weight":{"dtype":"F32","shape":[1e400],"data_offsets":[0,4]}}'
    with open(os.path.join(a, "adapter_model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"\0" * 4)
    return ["merge", "--base", model, "--adapter", a, "--out", os.path.join(root, "merged3")]


def recipe_bad_toml(root, model):
    return ["train", "--config", write(os.path.join(root, "bad.toml"), 'model = "m"\n[lora\nrank = 2\n')]


def recipe_huge_regex(root, model):
    regex = "(" * 100000 + "a" + ")" * 100000
    text = f'model = "{model}"\nout = "{root}/run"\ndata = "{root}/none.jsonl"\n[lora]\ntarget_modules = \'{regex}\'\n'
    return ["train", "--config", write(os.path.join(root, "regex.toml"), text)]


def dataset_bad_index(root, model):
    d = os.path.join(root, "dataset")
    write(os.path.join(d, "dataset.json"), '{"format": "gemmakit-token-dataset", "version": 1, "rows": 1e999}')
    return ["data", "stats", "--dataset", d]


def dataset_bad_shard(root, model):
    d = os.path.join(root, "dataset2")
    write(os.path.join(d, "dataset.json"), json.dumps(
        {"format": "gemmakit-token-dataset", "version": 1, "rows": 1, "tokens": 2, "loss_tokens": 1,
         "shards": [{"file": "shard-00000.safetensors", "rows": 1}]}))
    h = b'{"tokens":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},"x":' + b"[" * 5000 + b"]" * 5000 + b"}"
    with open(os.path.join(d, "shard-00000.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"\0" * 8)
    return ["data", "stats", "--dataset", d]


def bench_compare_bad(root, model):
    a = write(os.path.join(root, "a.json"), '{"request_rate": 1e999}')
    return ["bench", "compare", a, a]


def eval_compare_bad(root, model):
    a = write(os.path.join(root, "eval_a", "summary.json"), '{"pass_at_k": {"1": 1e999}}')
    return ["eval", "compare", os.path.dirname(a), os.path.dirname(a)]


def generate_on_cuda(root, model):
    return ["generate", "--model", model, "--prompt", "x", "--device", "cuda:1"]


def serve_on_cuda(root, model):
    return ["serve", "--model", model, "--port", "0", "--device", "cuda"]


def bench_model_on_cuda(root, model):
    return ["bench", "model", "--model", model, "--device", "cuda"]


def bench_model_gpu_flag_on_cpu(root, model):  # refused, not ignored
    return ["bench", "model", "--model", model, "--prefill-attention", "flash"]


def serve_batch_invariant_on_cpu(root, model):  # a promise the flag would not change there: refused
    return ["serve", "--model", model, "--port", "0", "--batch-invariant"]


def train_on_cuda(root, model):  # the device is checked before the recipe is read
    return ["train", "--config", os.path.join(root, "no-such-recipe.toml"), "--device", "cuda:7"]


def recipe_dev_zero(root, model):
    return ["train", "--config", "/dev/zero"]


def bench_compare_dev_zero(root, model):
    return ["bench", "compare", "/dev/zero", "/dev/zero"]


def report_bad_run_json(root, model):
    a = write(os.path.join(root, "run_a", "run.json"), '{"label": "a", "price_per_hour": 1e999}')
    b = write(os.path.join(root, "run_b", "run.json"), '{"label": "b"}')
    return ["report", os.path.dirname(a), os.path.dirname(b), "--out", os.path.join(root, "report", "r.html")]


CMD_CASES = [
    ("PEFT adapter_config.json number too large", adapter_bad_json, "adapter_config.json: not valid JSON"),
    ("PEFT adapter_config.json peft_type not a string", adapter_bad_type, "not a LoRA adapter"),
    ("PEFT adapter_model.safetensors number too large", adapter_bad_tensors, "not valid JSON: number overflow"),
    ("TOML recipe syntax error", recipe_bad_toml, "bad.toml:2:"),
    ("TOML recipe regex 100000 groups deep", recipe_huge_regex, "over the limit of 1024"),
    ("token data set index number too large", dataset_bad_index, "dataset.json: not valid JSON: number overflow"),
    ("token data set shard header nested deep", dataset_bad_shard, "nesting deeper than 512 levels"),
    ("bench compare result number too large", bench_compare_bad, "a.json: not valid JSON: number overflow"),
    ("eval compare summary number too large", eval_compare_bad, "summary.json: not valid JSON: number overflow"),
    ("report run.json number too large", report_bad_run_json, "run.json: not valid JSON: number overflow"),
    ("generate --device cuda:1 without a usable GPU", generate_on_cuda, "--device cuda:1: "),
    ("serve --device cuda without a usable GPU", serve_on_cuda, "--device cuda:0: "),
    ("bench model --device cuda without a usable GPU", bench_model_on_cuda, "--device cuda:0: "),
    ("train --device cuda:7 without a usable GPU", train_on_cuda, "--device cuda:7: "),
    ("bench model --prefill-attention on the CPU", bench_model_gpu_flag_on_cpu,
     "bench model: --prefill-attention takes --device cuda"),
    ("serve --batch-invariant on the CPU", serve_batch_invariant_on_cpu, "--batch-invariant takes --device cuda"),
    ("TOML recipe is /dev/zero", recipe_dev_zero, "/dev/zero: it is a device, not a file"),
    ("bench compare input is /dev/zero", bench_compare_dev_zero, "/dev/zero: it is a device, not a file"),
]


def run_case(gk, root, base, name, damage, args, needle):
    d = os.path.join(root, name.replace(" ", "_").replace("/", "_"))
    if damage == "no_weights":
        os.makedirs(d)
        shutil.copy(os.path.join(base, "config.json"), d)
    elif damage != "command":
        shutil.copytree(base, d)
        if damage:
            damage(d)
    cmd = [gk] + args if damage == "command" else [gk, "logprobs", "--model", d, "--json"] + args
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
        cases = CASES + [(name, "command", make(root, base), needle) for name, make, needle in CMD_CASES]
        for name, damage, args, needle in cases:
            problem = run_case(a.gemmakit, root, base, name, damage, args, needle)
            print(f"{'FAIL' if problem else 'ok  '} {name}{': ' + problem if problem else ''}")
            failed += bool(problem)
    print(f"{len(cases) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
