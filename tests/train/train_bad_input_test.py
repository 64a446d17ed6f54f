#!/usr/bin/python3
"""Bad input to `gemmakit train`: one error line, a non-zero status, never a crash.

    train_bad_input_test.py --gemmakit build/gemmakit [--keep DIR]

Every refused case must exit with status 1 (the CLI's Fail), print nothing on stdout, and print
exactly one "gemmakit: error: ..." line on stderr, as its last line, containing the expected
words; the only other line allowed is the data summary ("data: N rows read, ...") that comes
before the error when the JSONL was tokenized.  Nothing may look like a crash (status >= 128 or
a signal, "terminate called", "Aborted", "Segmentation", a traceback).  Command-line syntax
errors (CLI11's: a missing --config, a non-numeric --threads) are only held to a status in
[1, 128) and no crash: CLI11 prints its own two lines.

Cases: recipe syntax errors, an unknown key (with its suggestion), wrong types, out-of-range
values (all reported at once), no model / no data set, a missing recipe or one that is a
directory, missing model and data paths, bad --set (no '=', unknown key, wrong type, overflow),
micro_batch x grad_accum beyond the rows (also when the product overflows int64), epochs x
steps per epoch overflowing int64, a mismatched or missing lora.init_adapter, a damaged prepared
data set, a JSONL with no usable row and an empty one.

Then the runs: a JSONL with invalid JSON, a JSON array, missing/non-string fields, no
```verilog block, a systemverilog-only block, a blank prompt, invalid UTF-8, a row over
max_seq_len and blank lines among good rows trains on the good rows (status 0) and prints the
summary with the exact count per reason (also recorded in RUN/dataset/dataset.json and
training_run.json); rerunning that run directory without --resume is refused, resuming it with a
changed recipe (learning rate, rank, seed) is refused with an error naming the recipe, and
resuming with only checkpoint/log keys changed is accepted.
"""
import json
import os
import re
import shutil
import subprocess
import time

from train_common import (check, env, finish, make_model, make_short_rows, read_metrics, test_args, work_dir,
                          write_recipe)

CRASH = ("terminate called", "Aborted", "Segmentation", "Traceback", "core dumped", "std::")
SUMMARY_RE = re.compile(r"^data: (\d+) rows read, (\d+) kept, dropped: (.*); (\d+) tokens, (\d+) loss tokens$")


def train(gk, args, timeout=120):
    return subprocess.run([gk, "train"] + [str(a) for a in args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, env=env(), errors="replace")


def no_crash(name, p):
    check(0 <= p.returncode < 128, f"{name}: exit status {p.returncode} (a crash or a signal)\n{p.stderr}")
    for word in CRASH:
        check(word not in p.stderr and word not in p.stdout, f"{name}: {word!r} in the output:\n{p.stderr}")


def expect_error(gk, name, args, *needles):
    p = train(gk, args)
    no_crash(name, p)
    lines = p.stderr.rstrip("\n").split("\n") if p.stderr.strip() else []
    errors = [l for l in lines if l.startswith("gemmakit: error: ")]
    others = [l for l in lines if not l.startswith("gemmakit: error: ") and not SUMMARY_RE.match(l)]
    ok = check(p.returncode == 1, f"{name}: exit status {p.returncode}, want 1\n{p.stderr}")
    ok &= check(len(errors) == 1 and lines and lines[-1] == errors[0] and not others,
                f"{name}: want one 'gemmakit: error:' line (after at most the data summary), got:\n{p.stderr}")
    ok &= check(p.stdout == "", f"{name}: stdout not empty:\n{p.stdout}")
    err = errors[0] if errors else p.stderr
    for n in needles:
        ok &= check(n in err, f"{name}: {n!r} not in the error: {err}")
    print(f"  {'ok  ' if ok else 'FAIL'} {name}: {err[:150]}", flush=True)
    return err


def main():
    a = test_args()
    gk = a.gemmakit
    t0 = time.time()
    with work_dir(a.keep, "gk-train-bad-") as work:
        model = make_model(gk, os.path.join(work, "model"), seed=2)
        rows_path = os.path.join(work, "rows.jsonl")
        rows = make_short_rows(gk, work, rows_path, n=12, seed=5)
        W = lambda name: os.path.join(work, name)  # noqa: E731

        def toml(name, text):
            with open(W(name), "wb") as f:
                f.write(text.encode() if isinstance(text, str) else text)
            return W(name)

        base = {"model": model, "out": W("run"), "data.path": rows_path, "data.max_seq_len": 512, "lora.rank": 4,
                "lora.alpha": 8, "batch.grad_accum": 1, "batch.max_steps": 2, "checkpoint.save_every": 0}
        good = write_recipe(W("good.toml"), base)
        head = f'model = "{model}"\nout = "{W("r")}"\ndata.path = "{rows_path}"\n'

        print("recipes", flush=True)
        expect_error(gk, "syntax error", ["--config", toml("syn.toml", head + "[lora]\nrank = = 4\n")],
                     "syn.toml:5:", "parsing")
        expect_error(gk, "unterminated string", ["--config", toml("syn2.toml", head + 'seed = "3\n')], "syn2.toml:4:")
        expect_error(gk, "redefined table", ["--config", toml("syn3.toml", head + "[lora]\nrank=4\n[lora]\nalpha=2\n")],
                     "syn3.toml:", "lora")
        expect_error(gk, "binary recipe", ["--config", toml("bin.toml", b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)))],
                     "bin.toml:1:")
        expect_error(gk, "unknown key", ["--config", toml("unk.toml", head + "[lora]\nrnak = 4\n")],
                     "unk.toml:5:", '"lora.rnak"', 'did you mean "lora.rank"')
        expect_error(gk, "unknown table", ["--config", toml("unk2.toml", head + "[optimizer]\nlr = 1\n")],
                     "unk2.toml:", "unknown key")
        expect_error(gk, "string for an integer", ["--config", toml("ty.toml", head + '[lora]\nrank = "abc"\n')],
                     "ty.toml:5:", "lora.rank", "expected an integer")
        expect_error(gk, "float for an integer", ["--config", toml("ty2.toml", head + "[batch]\ngrad_accum = 2.5\n")],
                     "ty2.toml:5:", "batch.grad_accum", "expected an integer")
        expect_error(gk, "integer for a string", ["--config", toml("ty3.toml", head.replace(f'"{model}"', "5"))],
                     "ty3.toml:1:", "model", "expected a string")
        expect_error(gk, "array for a bool", ["--config", toml("ty4.toml", head + "data.shuffle = [true]\n")],
                     "ty4.toml:", "data.shuffle")
        expect_error(gk, "value for a table", ["--config", toml("ty5.toml", head + "lora = 3\n")], "lora", "table")
        expect_error(gk, "out-of-range values, all reported",
                     ["--config", toml("rng.toml", head + "data.loss = \"some\"\n[lora]\nrank = 0\ndropout = 1.0\n[optim]\n"
                                       "learning_rate = -1\nbeta2 = 1.5\n[batch]\nepochs = 0\n")],
                     "invalid recipe", "lora.rank", "lora.dropout", "optim.learning_rate", "optim.beta2",
                     "batch.epochs", "data.loss")
        expect_error(gk, "bad target_modules regex", ["--config", good, "--set", "lora.target_modules=(q_proj"],
                     "lora.target_modules", "regex")
        expect_error(gk, "no data", ["--config", toml("nodata.toml", f'model = "{model}"\nout = "{W("r")}"\n')],
                     "data.path")
        expect_error(gk, "no model", ["--config", toml("nomodel.toml", f'data = "{rows_path}"\nout = "{W("r")}"\n')],
                     "model")
        expect_error(gk, "recipe file missing", ["--config", W("nonexistent.toml")], "nonexistent.toml")
        expect_error(gk, "recipe is a directory", ["--config", work], work, "directory")
        expect_error(gk, "model dir missing", ["--config", good, "--set", f"model={W('no-such-model')}"], "no-such-model")
        expect_error(gk, "data file missing", ["--config", good, "--set", f"data={W('no-such.jsonl')}"], "no-such.jsonl")
        os.makedirs(W("not-a-dataset"), exist_ok=True)
        expect_error(gk, "data dir without dataset.json", ["--config", good, "--set", f"data={W('not-a-dataset')}"],
                     "not-a-dataset")
        with open(W("a-file"), "w") as f:
            f.write("x")
        expect_error(gk, "out is a file", ["--config", good, "--set", f"out={W('a-file')}/run"], "a-file")
        expect_error(gk, "full fine-tune that cannot fit",
                     ["--config", good, "--set", "lora.full_finetune=true", "--set", "memory.max_bytes=1000000",
                      "--set", f"out={W('full-run')}"],
                     "needs", "master weights (f32)", "allowed by memory.max_bytes")
        expect_error(gk, "full fine-tune from an adapter",
                     ["--config", good, "--set", "lora.full_finetune=true", "--set", f"lora.init_adapter={W('r')}"],
                     "init_adapter")

        print("--set", flush=True)
        for name, kv, needles in [
                ("no '='", "lora.rank", ["lora.rank", "key=value"]),
                ("empty key", "=4", ["key=value"]),
                ("unknown key", "lora.rnak=4", ['"lora.rnak"', '"lora.rank"']),
                ("unknown top-level key", "modle=x", ['"modle"', '"model"']),
                ("not an integer", "lora.rank=abc", ["lora.rank", "expected an integer"]),
                ("float for an integer", "batch.max_steps=2.5", ["batch.max_steps", "expected an integer"]),
                ("integer overflow", "lora.rank=99999999999999999999", ["lora.rank"]),
                ("int32 overflow", "lora.rank=2147483648", ["lora.rank"]),
                ("negative seed", "seed=-1", ["seed"]),
                ("not a bool", "data.shuffle=yes", ["data.shuffle", "true or false"]),
                ("not a number", "optim.learning_rate=fast", ["optim.learning_rate", "expected a number"]),
                ("empty number", "optim.learning_rate=", ["optim.learning_rate"]),
                ("number overflow", "lora.alpha=1e400", ["lora.alpha"]),
                ("nan", "optim.learning_rate=nan", ["optim.learning_rate"]),
                ("out of range", "lora.dropout=1", ["lora.dropout"]),
                ("bad choice", "data.batching=zip", ["data.batching"]),
                ("empty out", "out=", ["out"])]:
            expect_error(gk, f"--set {name}", ["--config", good, "--set", kv], *needles)

        print("command line", flush=True)
        for name, args in [("no --config", []), ("--threads abc", ["--config", good, "--threads", "abc"]),
                           ("unknown flag", ["--config", good, "--frobnicate"])]:
            p = train(gk, args)
            no_crash(name, p)
            check(p.returncode != 0, f"{name}: exit status 0")
            print(f"  {name}: status {p.returncode}", flush=True)

        print("data and setup", flush=True)
        expect_error(gk, "fewer rows than one step", ["--config", good, "--set", f"out={W('r-few')}",
                                                      "--set", "batch.micro_batch=50"], "fewer than one step")
        expect_error(gk, "micro_batch x grad_accum overflows", ["--config", good, "--set", f"out={W('r-ovf')}",
                                                                "--set", "batch.micro_batch=4611686018427387904",
                                                                "--set", "batch.grad_accum=4"], "fewer than one step")
        expect_error(gk, "epochs x steps overflows", ["--config", good, "--set", f"out={W('r-ovf3')}",
                                                      "--set", "batch.max_steps=-1",
                                                      "--set", "batch.epochs=4611686018427387904"], "batch.epochs")
        with open(W("nousable.jsonl"), "w") as f:
            f.write('not json\n{"prompt": "x"}\n{"prompt": "p", "response": "no code here"}\n\n')
        expect_error(gk, "no usable rows", ["--config", good, "--set", f"data={W('nousable.jsonl')}",
                                            "--set", f"out={W('r-nou')}"], "no usable rows", "nousable.jsonl")
        open(W("empty.jsonl"), "w").close()
        expect_error(gk, "empty JSONL", ["--config", good, "--set", f"data={W('empty.jsonl')}",
                                         "--set", f"out={W('r-empty')}"], "no usable rows")
        expect_error(gk, "init_adapter missing", ["--config", good, "--set", f"out={W('r-ia')}",
                                                  "--set", f"lora.init_adapter={W('no-adapter')}"], "no-adapter")

        print("a JSONL with bad rows trains on the good ones", flush=True)
        long_prompt = " ".join(["word"] * 1000)
        lines = [json.dumps(rows[0]), json.dumps(rows[1]),
                 "this is not json",
                 '["an", "array"]',
                 json.dumps({"prompt": "a prompt without a response"}),
                 json.dumps({"prompt": 5, "response": rows[2]["response"]}),
                 "",
                 json.dumps({"prompt": "no code", "response": "<think>hmm</think><answer>no idea</answer>"}),
                 json.dumps({"prompt": "sv only", "response": "```systemverilog\nmodule a; endmodule\n```"}),
                 json.dumps({"prompt": "   ", "response": rows[3]["response"]}),
                 json.dumps({"prompt": long_prompt, "response": rows[4]["response"]}),
                 json.dumps(rows[5]),
                 "   ",
                 json.dumps(rows[6])]
        bad_path = W("bad.jsonl")
        with open(bad_path, "wb") as f:
            for line in lines:
                f.write(line.encode() + b"\n")
            f.write(b'{"prompt": "bad \xff\xfe utf8", "response": "```verilog\\nmodule a; endmodule\\n```"}\n')
            f.write(json.dumps(rows[7]).encode() + b"\n")
        want = {"invalid_json": 2, "missing_field": 2, "no_code": 2, "empty": 1, "invalid_utf8": 1, "too_long": 1}
        raw, kept = 14, 5
        run_dir = W("run-bad")
        bad_recipe = write_recipe(W("bad.toml"), dict(base, **{"out": run_dir, "data.path": bad_path}))
        p = train(gk, ["--config", bad_recipe, "--threads", "2"])
        no_crash("bad rows", p)
        check(p.returncode == 0, f"bad rows: exit status {p.returncode}\n{p.stderr}")
        summary = [l for l in p.stderr.split("\n") if l.startswith("data: ")]
        if check(len(summary) == 1 and SUMMARY_RE.match(summary[0]), f"bad rows: no summary line:\n{p.stderr}"):
            m = SUMMARY_RE.match(summary[0])
            got = {}
            for part in m.group(3).split(", "):
                why, n = part.rsplit(" ", 1)
                got[why] = int(n)
            got = {k: v for k, v in got.items() if v}
            check((int(m.group(1)), int(m.group(2))) == (raw, kept),
                  f"bad rows: summary says {m.group(1)} read, {m.group(2)} kept; want {raw}, {kept}")
            check(got == want, f"bad rows: dropped {got}, want {want}")
            print(f"  {summary[0]}", flush=True)
        with open(os.path.join(run_dir, "dataset", "dataset.json")) as f:
            ds = json.load(f)
        check(ds["rows"] == kept and {k: v for k, v in ds["meta"]["dropped"].items() if v} == want,
              f"bad rows: dataset.json rows {ds['rows']}, dropped {ds['meta']['dropped']}")
        check(len(read_metrics(run_dir)) == 2, f"bad rows: {len(read_metrics(run_dir))} metrics lines, want 2")
        with open(os.path.join(run_dir, "training_run.json")) as f:
            tr = json.load(f)
        check(tr["dataset"]["rows"] == kept, f"bad rows: training_run.json dataset rows {tr['dataset']['rows']}")
        check(os.path.exists(os.path.join(run_dir, "adapter", "adapter_model.safetensors")), "bad rows: no adapter")

        print("resuming", flush=True)
        expect_error(gk, "existing run without --resume", ["--config", bad_recipe], "already has checkpoints", "--resume")
        expect_error(gk, "resume with a changed learning rate",
                     ["--config", bad_recipe, "--resume", "--set", "optim.learning_rate=0.5"], "different recipe")
        expect_error(gk, "resume with a changed rank", ["--config", bad_recipe, "--resume", "--set", "lora.rank=8"],
                     "different recipe")
        expect_error(gk, "resume with a changed seed", ["--config", bad_recipe, "--resume", "--set", "seed=9"],
                     "different recipe")
        p = train(gk, ["--config", bad_recipe, "--resume", "--set", "checkpoint.keep_last=5", "--set", "log.log_every=3"])
        no_crash("resume, only checkpoint/log keys changed", p)
        check(p.returncode == 0 and "resuming at step 2 of 2" in p.stderr,
              f"resume with only checkpoint/log keys changed: status {p.returncode}\n{p.stderr}")
        print(f"  resume with only checkpoint/log keys changed: status {p.returncode}", flush=True)

        print("adapters and data sets", flush=True)
        expect_error(gk, "init_adapter of another rank",
                     ["--config", good, "--set", f"out={W('r-ia2')}", "--set", "lora.rank=8",
                      "--set", f"lora.init_adapter={os.path.join(run_dir, 'adapter')}"], "lora.init_adapter", "rank")
        damaged = W("damaged-ds")
        shutil.copytree(os.path.join(run_dir, "dataset"), damaged)
        shard = os.path.join(damaged, "shard-00000.safetensors")
        size = os.path.getsize(shard)
        with open(shard, "r+b") as f:
            f.truncate(size - 9)
        expect_error(gk, "damaged data set", ["--config", good, "--set", f"data={damaged}", "--set", f"out={W('r-dmg')}"],
                     "shard-00000.safetensors")
    finish("train_bad_input", t0)


if __name__ == "__main__":
    main()
