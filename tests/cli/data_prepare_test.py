#!/usr/bin/env python3
"""`gemmakit data prepare` and `gemmakit data stats` end to end.

    data_prepare_test.py --gemmakit build/gemmakit

Input: tests/data/codev_r1_sample.jsonl (CodeV-R1-shaped rows: 4 good; one ```systemverilog only,
one without "response", one empty code block, one invalid JSON) plus rows added here (a line of
invalid UTF-8, a row too long for the limit, blank lines). The model directory is
`gemmakit init --preset tiny --no-weights` (config and the real tokenizer, no weights).

Checked independently of the C++ code: the shards are parsed here (safetensors by hand, numpy),
every row's token/mask structure is checked (<bos><|turn> ... <turn|>\\n<|turn>model\\n BODY <turn|>\\n,
mask exactly over BODY and its <turn|>), the printed counts and loss share match the data, the
statistics match numpy (np.percentile's linear interpolation), a rerun replaces the data set, and
bad input gives one "gemmakit: error:" line with exit status 1 and nothing on stdout.

Debian's python3 with numpy.
"""
import argparse
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
FIXTURE = os.path.join(HERE, "..", "data", "codev_r1_sample.jsonl")
BOS, TURN, TURN_END, NL, MODEL = 2, 105, 106, 107, 4368  # "model" is one piece in the Gemma vocabulary

failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print("FAIL:", msg, flush=True)
    return cond


def run(gk, args, timeout=120):
    return subprocess.run([gk] + args, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    kinds = {"I32": np.int32, "U8": np.uint8, "I64": np.int64}
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        out[name] = np.frombuffer(data[b:end], dtype=kinds[e["dtype"]]).reshape(e["shape"])
    return out


def read_dataset(d):
    with open(os.path.join(d, "dataset.json")) as f:
        index = json.load(f)
    rows = []
    for s in index["shards"]:
        t = read_safetensors(os.path.join(d, s["file"]))
        off = t["offsets"]
        check(len(off) == s["rows"] + 1, f"{s['file']}: {len(off)} offsets for {s['rows']} rows")
        for i in range(len(off) - 1):
            rows.append((t["tokens"][off[i]:off[i + 1]].tolist(), t["loss_mask"][off[i]:off[i + 1]].tolist()))
    return index, rows


def check_row_structure(tokens, mask, loss, where):
    if not check(tokens[:2] == [BOS, TURN] and tokens[-2:] == [TURN_END, NL], f"{where}: framing {tokens[:3]}...{tokens[-3:]}"):
        return
    # The model turn's header is the last <|turn> model \n; no empty thought block (<|channel> 100) anywhere.
    h = max(i for i, t in enumerate(tokens) if t == TURN)
    check(tokens[h:h + 3] == [TURN, MODEL, NL], f"{where}: model header {tokens[h:h + 3]}")
    check(tokens.count(TURN) == 2 and tokens.count(TURN_END) == 2, f"{where}: two turns")
    check(100 not in tokens and 101 not in tokens, f"{where}: a thought block in the training stream")
    user_end = tokens.index(TURN_END)
    check(tokens[user_end:user_end + 3] == [TURN_END, NL, TURN], f"{where}: user turn end {tokens[user_end:user_end + 3]}")
    if loss == "assistant":
        want = [0] * (h + 3) + [1] * (len(tokens) - h - 4) + [0]
    else:
        want = [0] + [1] * (len(tokens) - 1)
    check(mask == want, f"{where}: loss mask ({loss}) {mask} != {want}")


def make_input(root):
    with open(FIXTURE, "rb") as f:
        data = f.read()
    long_code = "\\n".join(f"    assign w{i} = a[{i}] ^ b[{i}];" for i in range(400))
    extra = (b"\n   \n"
             + b'{"prompt": "caf\xe9", "response": "```verilog\\nmodule m; endmodule\\n```"}\n'  # Latin-1, not UTF-8
             + ('{"prompt": "A wide XOR.", "response": "<answer>```verilog\\nmodule x;\\n' + long_code
                + '\\nendmodule\\n```</answer>"}\n').encode())
    path = os.path.join(root, "in.jsonl")
    with open(path, "wb") as f:
        f.write(data + extra)
    return path


def parse_summary(stdout):
    m = re.search(r"read (\d+) rows from .*: kept (\d+) \(([\d.]+) %\), dropped (\d+) \((.*)\)\n", stdout)
    t = re.search(r"tokens (\d+), loss tokens (\d+) \(([\d.]+) % of tokens", stdout)
    if not check(m and t, f"summary not understood: {stdout!r}"):
        return None
    items = [] if m.group(5) == "none" else m.group(5).split(", ")
    dropped = dict((k, int(v)) for k, v in (item.split(" ") for item in items))
    return {"raw": int(m.group(1)), "kept": int(m.group(2)), "dropped": dropped, "tokens": int(t.group(1)),
            "loss_tokens": int(t.group(2)), "share": float(t.group(3))}


WANT_DROPPED = {"invalid_json": 1, "missing_field": 1, "no_code": 1, "empty": 1, "invalid_utf8": 1, "too_long": 1}


def test_prepare(gk, root, model, inp):
    datasets = {}
    for loss in ("assistant", "all"):
        out = os.path.join(root, f"ds-{loss}")
        p = run(gk, ["data", "prepare", "--input", inp, "--model", model, "--max-seq-len", "1024", "--loss", loss,
                     "--out", out])
        if not check(p.returncode == 0, f"prepare --loss {loss}: exit {p.returncode}: {p.stderr}"):
            continue
        print(p.stdout, end="")
        s = parse_summary(p.stdout)
        index, rows = read_dataset(out)
        datasets[loss] = (index, rows)
        if s is None:
            continue
        check(s["raw"] == 10 and s["kept"] == 4, f"{loss}: raw/kept {s['raw']}/{s['kept']}, want 10/4")
        check(s["dropped"] == WANT_DROPPED, f"{loss}: dropped {s['dropped']}")
        tokens = sum(len(t) for t, _ in rows)
        loss_tokens = sum(sum(m) for _, m in rows)
        check(len(rows) == 4 and index["rows"] == 4, f"{loss}: {len(rows)} rows")
        check(s["tokens"] == tokens == index["tokens"], f"{loss}: tokens {s['tokens']} / {tokens} / {index['tokens']}")
        check(s["loss_tokens"] == loss_tokens == index["loss_tokens"], f"{loss}: loss tokens {s['loss_tokens']} / {loss_tokens}")
        check(abs(s["share"] - 100.0 * loss_tokens / tokens) < 0.006, f"{loss}: share {s['share']}")
        for i, (t, m) in enumerate(rows):
            check(len(t) <= 1024, f"{loss}: row {i} has {len(t)} tokens > 1024")
            check_row_structure(t, m, loss, f"{loss} row {i}")
        meta = index["meta"]
        for k, v in [("loss", loss), ("max_seq_len", 1024), ("raw", 10), ("kept", 4), ("dropped", WANT_DROPPED),
                     ("tokens", tokens), ("loss_tokens", loss_tokens), ("source", os.path.abspath(inp)),
                     ("model", os.path.abspath(model)), ("tokenizer", os.path.join(os.path.abspath(model), "tokenizer.json")),
                     ("arch", "gemma4")]:
            check(meta.get(k) == v, f"{loss}: meta[{k!r}] = {meta.get(k)!r}, want {v!r}")
    if len(datasets) == 2:
        a, b = datasets["assistant"][1], datasets["all"][1]
        check([t for t, _ in a] == [t for t, _ in b], "the loss mode changes the tokens")
        # Assistant-only loss is a minority of tokens (the reference case: about 15 %).
        share = sum(sum(m) for _, m in a) / sum(len(t) for t, _ in a)
        check(0.05 < share < 0.9, f"assistant loss share {share}")
        # Row 1 of the fixture: its code is kept, the draft in <think> is not.
        check(a[0][0].count(TURN) == 2, "row 0 turns")

    # --max-rows counts input rows; a larger --max-seq-len keeps the long row.
    out = os.path.join(root, "ds-assistant")
    p = run(gk, ["data", "prepare", "--input", inp, "--model", model, "--max-seq-len", "100000", "--loss", "assistant",
                 "--out", out])
    s = parse_summary(p.stdout) if check(p.returncode == 0, f"rerun: {p.stderr}") else None
    if s:
        check(s["kept"] == 5 and s["dropped"] == {k: v for k, v in WANT_DROPPED.items() if k != "too_long"},
              f"max-seq-len 100000: kept {s['kept']}, dropped {s['dropped']}")
        index, rows = read_dataset(out)
        check(index["rows"] == 5 and index["meta"]["max_seq_len"] == 100000, "the rerun replaced the data set")
        check(not [n for n in os.listdir(root) if ".tmp-" in n or ".old-" in n], f"leftovers: {os.listdir(root)}")
        long_row = max(len(t) for t, _ in rows)
        check(long_row > 1024, f"the long row has {long_row} tokens")
    p = run(gk, ["data", "prepare", "--input", inp, "--model", model, "--max-seq-len", "1024", "--loss", "assistant",
                 "--max-rows", "3", "--out", os.path.join(root, "ds-3")])
    s = parse_summary(p.stdout) if check(p.returncode == 0, f"--max-rows 3: {p.stderr}") else None
    if s:
        check(s["raw"] == 3 and s["kept"] == 3, f"--max-rows 3: raw {s['raw']} kept {s['kept']}")
    return datasets


def test_stats(gk, root, model, inp, datasets):
    if "assistant" not in datasets:
        return
    d = os.path.join(root, "ds-all")
    _, rows = datasets["all"]
    lengths = np.array([len(t) for t, _ in rows])
    p = run(gk, ["data", "stats", "--dataset", d, "--json", "--bin-width", "64"])
    if not check(p.returncode == 0, f"stats --dataset: {p.stderr}"):
        return
    j = json.loads(p.stdout)["lengths"]
    check(j["rows"] == len(lengths) and j["tokens"] == int(lengths.sum()), f"stats rows/tokens {j['rows']}/{j['tokens']}")
    check(j["min"] == lengths.min() and j["max"] == lengths.max(), "stats min/max")
    check(abs(j["mean"] - lengths.mean()) < 1e-9, f"stats mean {j['mean']} vs {lengths.mean()}")
    for name, q in [("p50", 50), ("p90", 90), ("p95", 95), ("p99", 99), ("p99.9", 99.9)]:
        want = float(np.percentile(lengths, q))
        check(abs(j["percentiles"][name] - want) <= 1e-9 * max(1.0, want), f"{name}: {j['percentiles'][name]} vs numpy {want}")
    hist = {h["upper"]: h["rows"] for h in j["histogram"]}
    want_hist = {}
    for n in lengths:
        up = -(-int(n) // 64) * 64
        want_hist[up] = want_hist.get(up, 0) + 1
    check(all(hist.get(k, 0) == v for k, v in want_hist.items()) and sum(hist.values()) == len(lengths),
          f"histogram {hist} vs {want_hist}")
    for c in (1024, 2048, 3072, 4096, 8192):
        check(j["rows_over"][str(c)] == int((lengths > c).sum()), f"rows_over {c}")

    # From the JSONL: no length limit, so the long row counts (and is over 1024).
    p = run(gk, ["data", "stats", "--input", inp, "--model", model, "--json"])
    if check(p.returncode == 0, f"stats --input: {p.stderr}"):
        j = json.loads(p.stdout)
        check(j["raw"] == 10 and j["kept"] == 5 and j["dropped"]["too_long"] == 0, f"stats --input counts {j}")
        check(j["lengths"]["rows_over"]["1024"] == 1, f"rows over 1024: {j['lengths']['rows_over']}")
    p = run(gk, ["data", "stats", "--input", inp, "--model", model])
    if check(p.returncode == 0, f"stats text: {p.stderr}"):
        print(p.stdout, end="")
        check("percentiles" in p.stdout and "histogram" in p.stdout and re.search(r"^\s+1024\s+1\s", p.stdout, re.M),
              f"stats text: {p.stdout!r}")


def expect_error(gk, name, args, needle):
    p = run(gk, args)
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    ok = (p.returncode == 1 and len(lines) == 1 and lines[0].startswith("gemmakit: error: ")
          and needle.lower() in p.stderr.lower() and not p.stdout.strip())
    check(ok, f"{name}: exit {p.returncode}, stdout {p.stdout[:200]!r}, stderr {p.stderr!r} (want one error line with {needle!r})")
    if ok:
        print(f"ok   {name}: {lines[0]}")


def test_bad_input(gk, root, model, inp):
    prep = ["data", "prepare", "--max-seq-len", "1024", "--loss", "assistant"]
    out = os.path.join(root, "bad-out")
    expect_error(gk, "missing input", prep + ["--input", os.path.join(root, "nope.jsonl"), "--model", model, "--out", out],
                 "nope.jsonl")
    no_tok = os.path.join(root, "no-tokenizer")
    shutil.copytree(model, no_tok)
    os.remove(os.path.join(no_tok, "tokenizer.json"))
    expect_error(gk, "model without tokenizer.json", prep + ["--input", inp, "--model", no_tok, "--out", out],
                 "tokenizer.json")
    expect_error(gk, "model directory missing", prep + ["--input", inp, "--model", os.path.join(root, "nomodel"),
                                                       "--out", out], "config.json")
    expect_error(gk, "bad --loss", ["data", "prepare", "--input", inp, "--model", model, "--max-seq-len", "9",
                                    "--loss", "prompt", "--out", out], "--loss")
    expect_error(gk, "--max-seq-len 0", ["data", "prepare", "--input", inp, "--model", model, "--max-seq-len", "0",
                                         "--loss", "all", "--out", out], "--max-seq-len")
    expect_error(gk, "every row too long", prep[:2] + ["--max-seq-len", "5", "--loss", "all", "--input", inp,
                                                       "--model", model, "--out", out], "no rows kept")
    bad_only = os.path.join(root, "bad.jsonl")
    with open(bad_only, "w") as f:
        f.write('{"prompt": 1}\nnot json\n')
    expect_error(gk, "no good rows", prep + ["--input", bad_only, "--model", model, "--out", out], "no rows kept")
    check(not os.path.exists(out), "a failed prepare created its --out")
    home = os.path.join(root, "home")
    os.makedirs(home)
    with open(os.path.join(home, "notes.txt"), "w") as f:
        f.write("keep")
    expect_error(gk, "--out is not a data set", prep + ["--input", inp, "--model", model, "--out", home], "refusing")
    check(os.listdir(home) == ["notes.txt"], "the non-data-set --out was touched")

    expect_error(gk, "stats without a source", ["data", "stats"], "--dataset")
    expect_error(gk, "stats with both sources", ["data", "stats", "--input", inp, "--model", model, "--dataset", home],
                 "either")
    expect_error(gk, "stats --input without --model", ["data", "stats", "--input", inp], "--model")
    expect_error(gk, "stats --bin-width 0", ["data", "stats", "--dataset", home, "--bin-width", "0"], "--bin-width")
    expect_error(gk, "stats on a directory without dataset.json", ["data", "stats", "--dataset", home], "dataset.json")

    good = os.path.join(root, "ds-all")
    if not os.path.isdir(good):
        return
    shard = "shard-00000.safetensors"

    def damaged(name, fn, needle):
        d = os.path.join(root, "damaged-" + name.replace(" ", "_"))
        shutil.copytree(good, d)
        fn(d)
        expect_error(gk, f"stats on a data set with {name}", ["data", "stats", "--dataset", d], needle)

    def truncate(d):
        p = os.path.join(d, shard)
        with open(p, "r+b") as f:
            f.truncate(os.path.getsize(p) - 10)

    def set_mask_value(d):
        p = os.path.join(d, shard)
        with open(p, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
        b = header["loss_mask"]["data_offsets"][0]
        with open(p, "r+b") as f:
            f.seek(8 + n + b + 3)
            f.write(b"\x02")

    def break_offsets(d):
        p = os.path.join(d, shard)
        with open(p, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
        b = header["offsets"]["data_offsets"][0]
        with open(p, "r+b") as f:
            f.seek(8 + n + b + 8)  # offsets[1] = a huge value: offsets[2] is then smaller
            f.write(struct.pack("<q", 1 << 40))

    def wrong_rows(d):
        p = os.path.join(d, "dataset.json")
        with open(p) as f:
            j = json.load(f)
        j["shards"][0]["rows"] += 1
        j["rows"] += 1
        with open(p, "w") as f:
            json.dump(j, f)

    damaged("a truncated shard", truncate, shard)
    damaged("mask value 2", set_mask_value, "loss_mask")
    damaged("offsets not monotone", break_offsets, "not increasing")
    damaged("rows mismatch", wrong_rows, "rows")
    damaged("no dataset.json", lambda d: os.remove(os.path.join(d, "dataset.json")), "dataset.json")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemmakit", required=True)
    ap.add_argument("--tokenizer-dir", help="Gemma 3 tokenizer for `gemmakit init` (default: the binary's)")
    a = ap.parse_args()
    gk = os.path.abspath(a.gemmakit)
    with tempfile.TemporaryDirectory() as root:
        model = os.path.join(root, "model")
        init = ["init", "--preset", "tiny", "--out", model, "--no-weights"]
        if a.tokenizer_dir:
            init += ["--tokenizer-dir", a.tokenizer_dir]
        p = run(gk, init)
        if p.returncode != 0 or not os.path.exists(os.path.join(model, "tokenizer.json")):
            print(f"FAIL: gemmakit init did not write a model with a tokenizer: {p.stderr.strip()}")
            return 1
        inp = make_input(root)
        datasets = test_prepare(gk, root, model, inp)
        test_stats(gk, root, model, inp, datasets)
        test_bad_input(gk, root, model, inp)
    print(f"{'FAILED: ' + str(len(failures)) + ' problem(s)' if failures else 'all passed'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
