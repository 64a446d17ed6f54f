#!/usr/bin/env python3
"""`gemmakit eval verilog` end to end: re-scoring given candidates (verilog-eval references and
broken copies, when ../shared exists), then generating through a live `gemmakit serve` and
through the in-process engine (tiny model, random weights: every sample fails, the pipeline
is what is checked), and bad input. pass@k is recomputed here from samples.jsonl with the
closed form 1 - C(n-c, k) / C(n, k).

    eval_verilog_e2e_test.py --gemmakit build/gemmakit
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "serve"))
from serve_harness import ServeProcess, check, fail, make_tiny_model  # noqa: E402

SHARED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "verilog-eval")


def run(gk, *args, ok=True):
    p = subprocess.run([gk, *args], capture_output=True, text=True, timeout=900)
    if ok and p.returncode != 0:
        fail(f"{' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def pass_at_k(n, c, k):
    return 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)


def check_summary(out, k_values):
    rows = [json.loads(line) for line in open(os.path.join(out, "samples.jsonl"))]
    s = json.load(open(os.path.join(out, "summary.json")))
    per = {}
    for r in rows:
        n, c = per.get(r["problem"], (0, 0))
        per[r["problem"]] = (n + 1, c + (1 if r["passed"] else 0))
    for k in k_values:
        want = sum(pass_at_k(n, c, k) for n, c in per.values()) / len(per)
        got = s["pass_at_k"][str(k)]
        check(abs(got - want) < 1e-12, f"pass@{k}: summary {got}, recomputed {want}")
    check(s["problems_all_pass"] == sum(1 for n, c in per.values() if c == n), "problems at 100 %")
    check(s["problems_none_pass"] == sum(1 for n, c in per.values() if c == 0), "problems at 0 %")
    for f in ("pass_rate_per_problem.svg", "score_distribution.svg"):
        text = open(os.path.join(out, f)).read()
        check(text.startswith("<svg") and text.rstrip().endswith("</svg>"), f"{f} is not an SVG")
    return rows, s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemmakit", required=True)
    gk = ap.parse_args().gemmakit
    with tempfile.TemporaryDirectory(prefix="gk-eval-") as tmp:
        # 1. Candidates: the reference of 6 problems (sample 0) and a broken copy (sample 1).
        if os.path.isdir(SHARED):
            ds = os.path.join(SHARED, "dataset_spec-to-rtl")
            names = ["Prob001_zero", "Prob002_m2014_q4i", "Prob010_mt2015_q4a", "Prob035_count1to10",
                     "Prob099_m2014_q6c", "Prob120_fsm3s"]
            cands = os.path.join(tmp, "cands.jsonl")
            with open(cands, "w") as f:
                for name in names:
                    ref = open(os.path.join(ds, name + "_ref.sv")).read().replace("module RefModule", "module TopModule", 1)
                    f.write(json.dumps({"problem": name, "sample": 0, "code": ref}) + "\n")
                    f.write(json.dumps({"problem": name, "sample": 1, "code": ref.replace("endmodule", "wire;\nendmodule")}) + "\n")
            out = os.path.join(tmp, "cands-out")
            p = run(gk, "eval", "verilog", "--dataset", SHARED, "--candidates", cands, "--k", "1,2", "--workers", "2",
                    "--out", out)
            rows, s = check_summary(out, [1, 2])
            got = {(r["problem"], r["sample"]): r["category"] for r in rows}
            for name in names:
                want = "compile_error" if name == "Prob099_m2014_q6c" else "pass"  # Prob099: the dataset bug
                check(got[(name, 0)] == want, f"{name} reference: {got[(name, 0)]}")
                check(got[(name, 1)] == "compile_error", f"{name} broken copy: {got[(name, 1)]}")
            check(abs(s["pass_at_k"]["1"] - 5 / 12) < 1e-12 and abs(s["pass_at_k"]["2"] - 5 / 6) < 1e-12,
                  f"pass@k {s['pass_at_k']}")
            check("pass@1" in p.stdout and "Icarus Verilog" in p.stdout, f"console summary:\n{p.stdout}")
            dataset, problems = SHARED, "Prob001,Prob002"
        else:
            print("skip: no ../shared/verilog-eval (CI has it); generating with a synthetic set instead")
            dataset = os.path.join(tmp, "synth")
            run(gk, "data", "synth-verilog", "--out", dataset, "--n", "2", "--seed", "1")
            problems = ""

        # The synthetic generator's references pass our scorer too (its own test uses iverilog directly).
        synth = os.path.join(tmp, "synth-refs")
        run(gk, "data", "synth-verilog", "--out", synth, "--n", "16", "--seed", "2")
        refs = os.path.join(tmp, "synth-refs.jsonl")
        with open(refs, "w") as f:
            for p in sorted(os.listdir(os.path.join(synth, "dataset_spec-to-rtl"))):
                if p.endswith("_ref.sv"):
                    code = open(os.path.join(synth, "dataset_spec-to-rtl", p)).read()
                    f.write(json.dumps({"problem": p[:-len("_ref.sv")], "sample": 0,
                                        "code": code.replace("module RefModule", "module TopModule", 1)}) + "\n")
        out = os.path.join(tmp, "synth-out")
        run(gk, "eval", "verilog", "--dataset", synth, "--candidates", refs, "--k", "1", "--out", out)
        _, s = check_summary(out, [1])
        check(s["pass_at_k"]["1"] == 1.0 and s["problems_all_pass"] == 16, f"synthetic references: {s['categories']}")

        # Attacks on the testbench (verilog_scorer_test.cc has every class in several spellings):
        # a right design plus a construct that could steer the testbench is refused, with a reason.
        first = json.loads(open(refs).readline())
        attacks = ["initial force tb.tb_match = 1'b1;", "initial #100 $finish;", "integer r;\ninitial r = $random;"]
        cands = os.path.join(tmp, "attacks.jsonl")
        with open(cands, "w") as f:
            f.write(json.dumps(first) + "\n")
            for i, a in enumerate(attacks, 1):
                head, _, tail = first["code"].rpartition("endmodule")  # inside TopModule
                code = head + a + "\nendmodule" + tail
                f.write(json.dumps({"problem": first["problem"], "sample": i, "code": code}) + "\n")
        out = os.path.join(tmp, "attacks-out")
        p = run(gk, "eval", "verilog", "--dataset", synth, "--candidates", cands, "--k", "1", "--out", out)
        rows, s = check_summary(out, [1])
        check(s["categories"] == {"pass": 1, "forbidden_construct": 3}, f"attacks: {s['categories']}")
        for r in rows:
            check((r["category"] == "forbidden_construct") == bool(r["reason"]), f"reason of sample {r['sample']}: {r}")
            check(r["reference_samples"] > 0, f"no reference sample count: {r}")

        # 2. Through a live server, and 3. through the in-process engine.
        model = make_tiny_model(gk, os.path.join(tmp, "tiny"))
        args = ["--max-model-len", "1024", "--kv-cache-memory", "64MiB", "--served-model-name", "tiny"]
        common = ["--dataset", dataset, "--n-samples", "2", "--max-tokens", "24", "--k", "1,2,5", "--seed", "7"]
        if problems:
            common += ["--problems", problems]
        with ServeProcess(gk, model, args) as server:
            out = os.path.join(tmp, "served")
            run(gk, "eval", "verilog", *common, "--base-url", server.base_url, "--out", out)
            rows, s = check_summary(out, [1, 2])
            check(len(rows) == 4 and set(s["pass_at_k"]) == {"1", "2"}, f"k=5 > n=2 must be dropped: {s['pass_at_k']}")
            gens = [json.loads(line) for line in open(os.path.join(out, "generations.jsonl"))]
            check(len(gens) == 4 and all("response" in g and "code" in g for g in gens), "generations.jsonl")
            # generations.jsonl is a valid --candidates file: re-scoring gives the same verdicts.
            again = os.path.join(tmp, "again")
            run(gk, "eval", "verilog", "--dataset", dataset, "--candidates", os.path.join(out, "generations.jsonl"),
                "--k", "1,2", "--out", again)
            rows2, _ = check_summary(again, [1, 2])
            check([r["category"] for r in rows] == [r["category"] for r in rows2], "re-scoring changed verdicts")
        out = os.path.join(tmp, "engine")
        run(gk, "eval", "verilog", *common, "--model", model, "--out", out)
        rows, _ = check_summary(out, [1, 2])
        check(len(rows) == 4, "engine run: 2 problems x 2 samples")
        p = run(gk, "eval", "compare", os.path.join(tmp, "served"), out, "--labels", "server,engine")
        check("server" in p.stdout and "pass@1" in p.stdout, f"eval compare:\n{p.stdout}")

        # 4. Bad input: one error line, status 1.
        for bad in (["--dataset", "/nonexistent", "--candidates", "x.jsonl"],
                    ["--dataset", dataset, "--candidates", "/nonexistent.jsonl"],
                    ["--dataset", dataset, "--model", model, "--base-url", "http://127.0.0.1:1"],
                    ["--dataset", dataset, "--candidates", os.path.join(tmp, "bad.jsonl")],
                    ["--dataset", dataset, "--model", model, "--k", "0"],
                    ["--dataset", dataset, "--model", model, "--problems", "Prob999"]):
            with open(os.path.join(tmp, "bad.jsonl"), "w") as f:
                f.write('{"problem": "Prob001_zero", "code": "x"}\n')
            p = run(gk, "eval", "verilog", *bad, ok=False)
            lines = p.stderr.strip().splitlines()
            check(p.returncode == 1 and len(lines) == 1 and lines[0].startswith("gemmakit: error:"),
                  f"{bad}: want one error line and status 1, got {p.returncode}: {p.stderr!r}")
    print("eval verilog e2e: ok")


if __name__ == "__main__":
    main()
