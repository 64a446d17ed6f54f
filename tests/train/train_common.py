"""Shared helpers of the `gemmakit train` end-to-end tests (tests/train/*_test.py).

Debian's /usr/bin/python3 with numpy (and torch for the oracle test); stdlib otherwise.

  test_args(), work_dir(keep, pfx)  the tests' --gemmakit / --keep, and their work directory
  has_cuda_device(gk)               whether `gemmakit devices` lists a CUDA device
  make_model(gk, dir, seed)         `gemmakit init --preset tiny` (random weights, real tokenizer)
  make_short_rows(gk, path, ...)    CodeV-R1-style rows from `gemmakit data synth-verilog`, their
                                    prompts cut to a dozen words so that a row is ~60-150 tokens
                                    (the vocabulary of 262,144 makes every token cost a lot)
  write_recipe(path, **keys)        a TOML recipe from {"lora.rank": 4, "model": ..., ...}
  read_safetensors(path)            {name: numpy array} (F32, BF16, F16, I32, I64, U8), by hand
  read_metrics(run_dir)             the parsed lines of RUN/metrics.jsonl
  check_steps(label, run, ref, n)   a run's metrics against a reference's losses.json, step by step
"""

import argparse
import contextlib
import json
import os
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.abspath(os.path.join(HERE, "..", ".."))
TOKENIZER_DIR = os.path.join(SOURCE_DIR, "build", "tokenizer", "gemma3")
ORACLE_DIR = os.path.join(SOURCE_DIR, "tests", "oracle")

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg, flush=True)
    return cond


def fail(msg):
    print("FAIL:", msg, file=sys.stderr, flush=True)
    sys.exit(1)


def finish(name, t0):
    dt = time.time() - t0
    if failures:
        print(f"{name}: {len(failures)} failure(s) ({dt:.1f} s)", flush=True)
        sys.exit(1)
    print(f"{name}: all checks passed ({dt:.1f} s)", flush=True)


def test_args(more=None):
    """The train tests' command line: --gemmakit PATH (made absolute), --keep DIR, and what
    more(parser) adds."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemmakit", required=True)
    ap.add_argument("--keep", help="work in this directory and leave it")
    if more:
        more(ap)
    a = ap.parse_args()
    a.gemmakit = os.path.abspath(a.gemmakit)
    return a


@contextlib.contextmanager
def work_dir(keep, prefix):
    """A temporary directory removed after, or --keep's (made, and left behind)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        work = os.path.abspath(keep) if keep else tmp
        os.makedirs(work, exist_ok=True)
        yield work


def env():
    e = dict(os.environ)
    e.setdefault("GEMMAKIT_TOKENIZER_DIR", TOKENIZER_DIR)
    return e


def run(gk, args, timeout=300, ok=True):
    p = subprocess.run([gk] + [str(a) for a in args], capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL, env=env())
    if ok and p.returncode != 0:
        fail(f"gemmakit {' '.join(str(a) for a in args)} failed with status {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p


def has_cuda_device(gk):
    """Whether `gemmakit devices` lists a CUDA device (a CUDA build on a machine with a GPU)."""
    p = subprocess.run([gk, "devices", "--json"], capture_output=True, text=True, timeout=60)
    try:
        return bool(json.loads(p.stdout).get("cuda", {}).get("devices"))
    except ValueError:
        return False


def make_model(gk, out_dir, seed=1):
    run(gk, ["init", "--preset", "tiny", "--out", out_dir, "--seed", seed])
    return out_dir


def make_short_rows(gk, work, path, n, seed, words=12):
    """Writes `n` CodeV-R1-style rows to `path` (prompt shortened, response as synthesised:
    <think>...</think><answer>```verilog ...```</answer>); returns them as dicts."""
    syn = os.path.join(work, f"synth-{seed}")
    run(gk, ["data", "synth-verilog", "--out", syn, "--n", n, "--seed", seed])
    rows = []
    with open(os.path.join(syn, "sft.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            prompt = " ".join(r["prompt"].split("\n\n")[-1].split()[:words])
            rows.append({"system": r.get("system", ""), "prompt": prompt, "response": r["response"]})
    with open(path, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    return rows


def toml_value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(str(v))  # a TOML basic string is a JSON string for our inputs


def write_recipe(path, keys):
    """keys: {"model": ..., "lora.rank": 4, ...}; top-level keys first, then one table each."""
    top = {k: v for k, v in keys.items() if "." not in k}
    tables = {}
    for k, v in keys.items():
        if "." in k:
            t, leaf = k.split(".", 1)
            tables.setdefault(t, {})[leaf] = v
    lines = [f"{k} = {toml_value(v)}" for k, v in top.items()]
    for t, kv in tables.items():
        lines.append(f"\n[{t}]")
        lines += [f"{k} = {toml_value(v)}" for k, v in kv.items()]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


_DT = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I32": np.int32, "I64": np.int64, "U8": np.uint8}


def read_safetensors(path, with_meta=False):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        raw = data[base + b:base + end]
        if e["dtype"] == "BF16":
            arr = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            arr = np.frombuffer(raw, dtype=np.dtype(_DT[e["dtype"]]).newbyteorder("<"))
        out[name] = arr.reshape(e["shape"])
    if with_meta:
        return out, header
    return out


def read_metrics(run_dir):
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def losses_as_metrics(ref):
    """A reference's losses.json records in RUN/metrics.jsonl's names, for check_steps(got=)."""
    with open(os.path.join(ref, "losses.json")) as f:
        return [{"step": w["step"], "loss": w["loss"], "grad_norm": w["grad_norm"], "learning_rate": w["lr"],
                 "target_tokens": w["target_tokens"]} for w in json.load(f)["steps"]]


def check_steps(label, out, ref, steps, got=None):
    """RUN/metrics.jsonl (or got, in its names) against a reference's losses.json (train_ref.py's
    layout), step by step: step numbers and target tokens exactly, loss to 1e-4 and the
    pre-clipping gradient norm to 1e-3 (relative), the learning rate to 1e-9. Returns the
    reference's records."""
    if got is None:
        got = read_metrics(out)
    with open(os.path.join(ref, "losses.json")) as f:
        want = json.load(f)["steps"]
    check(len(got) == steps and len(want) == steps, f"{label}: {len(got)} metrics lines, {len(want)} oracle steps")
    for g, w in zip(got, want):
        s = w["step"]
        print(f"[{label}] step {s}: loss {g['loss']:.7f} / {w['loss']:.7f} (rel {rel(g['loss'], w['loss']):.1e})  "
              f"grad_norm {g['grad_norm']:.6f} / {w['grad_norm']:.6f} (rel {rel(g['grad_norm'], w['grad_norm']):.1e})  "
              f"lr {g['learning_rate']:.4e}  targets {g['target_tokens']}", flush=True)
        check(g["step"] == s, f"{label}: metrics step {g['step']} vs oracle step {s}")
        check(g["target_tokens"] == w["target_tokens"],
              f"{label} step {s}: target_tokens {g['target_tokens']} vs {w['target_tokens']}")
        check(rel(g["loss"], w["loss"]) < 1e-4, f"{label} step {s}: loss {g['loss']} vs oracle {w['loss']}")
        check(rel(g["grad_norm"], w["grad_norm"]) < 1e-3,
              f"{label} step {s}: grad_norm {g['grad_norm']} vs oracle {w['grad_norm']}")
        check(abs(g["learning_rate"] - w["lr"]) < 1e-9, f"{label} step {s}: lr {g['learning_rate']} vs {w['lr']}")
    return want


def count_lines(path):
    try:
        with open(path, "rb") as f:
            return sum(1 for line in f if line.endswith(b"\n"))
    except FileNotFoundError:
        return 0
