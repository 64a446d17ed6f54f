#!/usr/bin/env python3
"""`gemmakit bench serve` end to end against a real `gemmakit serve` (tiny model, loopback).

Checks what can be checked exactly:
  - every random prompt is exactly --random-input-len tokens as the *server* counts them
    (usage.prompt_tokens summed = num_prompts x input_len), and ignore_eos gives exactly
    --random-output-len tokens each;
  - the server's own counters (/metrics: vllm:prompt_tokens_total, generation_tokens_total,
    request_success_total) grew by what the client reports, plus its ready-check request;
  - mean, median, std and percentiles of TTFT, TPOT, ITL and E2EL in the result JSON equal
    numpy's over the per-request arrays of --save-detailed (the independent oracle for our
    statistics), goodput counts match a recount, and the vLLM field names are present;
  - a sweep writes one file per point and a summary, and `bench compare` reads both kinds and
    writes SVG plots; a jsonl dataset of verilog-eval prompts replays (when ../shared exists);
  - bad flags fail with one line and status 1.

    bench_serve_e2e_test.py --gemmakit build/gemmakit
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "serve"))
from serve_harness import ServeProcess, check, fail, make_tiny_model, metric_total, metrics, wait_idle  # noqa: E402

SHARED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared")


def bench(gk, *args, expect_ok=True):
    p = subprocess.run([gk, "bench", *args], capture_output=True, text=True, timeout=600)
    if expect_ok and p.returncode != 0:
        fail(f"bench {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def stats_match(result, name, values, percentiles):
    v = np.asarray(values, dtype=np.float64)
    expect = {f"mean_{name}_ms": np.mean(v) * 1000 if len(v) else 0.0,
              f"median_{name}_ms": np.median(v) * 1000 if len(v) else 0.0,
              f"std_{name}_ms": np.std(v) * 1000 if len(v) else 0.0}
    for p in percentiles:
        word = str(int(p)) if int(p) == p else str(p)
        expect[f"p{word}_{name}_ms"] = np.percentile(v, p) * 1000 if len(v) else 0.0
    for key, want in expect.items():
        check(key in result, f"result has no {key}")
        got = result[key]
        check(abs(got - want) <= 1e-9 * max(1.0, abs(want)), f"{key}: ours {got!r}, numpy {want!r}")


def check_point(r, n, input_len, output_len):
    check(r["completed"] == n and r["failed"] == 0, f"completed/failed {r['completed']}/{r['failed']}: {r.get('errors')}")
    check(r["total_input_tokens"] == n * input_len,
          f"server counted {r['total_input_tokens']} prompt tokens, want {n} x {input_len}")
    check(r["total_output_tokens"] == n * output_len, f"output tokens {r['total_output_tokens']}, want {n * output_len}")
    check(r["input_lens"] == [input_len] * n, f"input_lens {r['input_lens']}")
    check(r["output_lens"] == [output_len] * n, f"output_lens {r['output_lens']}")
    pct = [50, 90, 99]
    ttfts, lat, itls = r["ttfts"], r["latencies"], r["itls"]
    tpots = [(lat[i] - ttfts[i]) / (r["output_lens"][i] - 1) for i in range(n) if r["output_lens"][i] > 1]
    stats_match(r, "ttft", ttfts, pct)
    stats_match(r, "tpot", tpots, pct)
    stats_match(r, "itl", [x for per in itls for x in per], pct)
    stats_match(r, "e2el", lat, pct)
    check(all(len(per) == output_len - 1 for per in itls), "one ITL per token after the first (one token per chunk)")
    dur = r["duration"]
    check(abs(r["output_throughput"] - n * output_len / dur) < 1e-6, "output_throughput = tokens / duration")
    check(abs(r["request_throughput"] - n / dur) < 1e-9, "request_throughput = completed / duration")
    check(abs(r["total_token_throughput"] - n * (input_len + output_len) / dur) < 1e-6, "total_token_throughput")
    # Peak tok/s and concurrency, recomputed as vLLM does.
    start0 = min(r["start_times"])
    bins = {}
    for i in range(n):
        t = r["start_times"][i] + ttfts[i]
        for k in range(output_len):
            if k:
                t += itls[i][k - 1]
            b = int(t - start0)
            bins[b] = bins.get(b, 0) + 1
    check(r["max_output_tokens_per_s"] == max(bins.values()), f"peak tok/s {r['max_output_tokens_per_s']} vs {bins}")
    ev = sorted([(r["start_times"][i], 1) for i in range(n)] + [(r["start_times"][i] + lat[i], -1) for i in range(n)])
    cur = peak = 0
    for _, d in ev:
        cur += d
        peak = max(peak, cur)
    check(r["max_concurrent_requests"] == peak, f"peak concurrency {r['max_concurrent_requests']} vs {peak}")
    for key in ("date", "endpoint_type", "backend", "model_id", "tokenizer_id", "num_prompts", "request_rate",
                "burstiness", "max_concurrency", "request_goodput", "rtfx", "queue_times", "gemmakit"):
        check(key in r, f"result has no {key}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemmakit", required=True)
    gk = ap.parse_args().gemmakit
    with tempfile.TemporaryDirectory(prefix="gk-bench-") as tmp:
        model = make_tiny_model(gk, os.path.join(tmp, "tiny"))
        args = ["--max-model-len", "512", "--kv-cache-memory", "64MiB", "--served-model-name", "tiny",
                "--max-num-seqs", "16"]
        with ServeProcess(gk, model, args) as server:
            url = server.base_url
            before = wait_idle(url)
            n, il, ol = 12, 40, 6
            out = os.path.join(tmp, "point")
            p = bench(gk, "serve", "--base-url", url, "--tokenizer", model, "--dataset-name", "random",
                      "--random-input-len", str(il), "--random-output-len", str(ol), "--num-prompts", str(n),
                      "--request-rate", "inf", "--temperature", "0", "--seed", "3",
                      "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
                      "--goodput", "ttft:100000", "e2el:0.001", "--save-result", "--save-detailed",
                      "--result-dir", out, "--label", "tiny-cpu", "--metadata", "hardware=test-vm")
            for line in ("============ Serving Benchmark Result ============", "Successful requests:",
                         "Total generated tokens:", "Request goodput (req/s):", "P90 ITL (ms):",
                         "Median E2EL (ms):", "Client overhead:"):
                check(line in p.stdout, f"summary lacks {line!r}:\n{p.stdout}")
            files = glob.glob(os.path.join(out, "tiny-cpu-infqps-tiny-*.json"))
            check(len(files) == 1, f"want one result file named as vLLM names them, got {os.listdir(out)}")
            r = json.load(open(files[0]))
            check_point(r, n, il, ol)
            check(r["model_id"] == "tiny", "the model comes from /v1/models")
            check(r["hardware"] == "test-vm", "--metadata lands at the top level")
            check(r["request_rate"] == "inf", "request_rate inf is the string 'inf'")
            # Goodput: the e2el SLO of 1 us fails everything.
            check(r["request_goodput"] == 0, f"goodput {r['request_goodput']} with an impossible e2el SLO")
            # The server's counters agree with the client's totals (+ the ready-check request 0).
            after = wait_idle(url)
            d = {k: metric_total(after, k) - metric_total(before, k)
                 for k in ("vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:prefix_cache_queries_total",
                           "vllm:prefix_cache_hits_total", "vllm:request_success_total")}
            # The server counts computed prompt tokens; request 0 ran twice, so its full blocks hit the cache.
            check(d["vllm:prefix_cache_queries_total"] == (n + 1) * il, f"server saw prompt tokens {d}")
            check(d["vllm:prompt_tokens_total"] + d["vllm:prefix_cache_hits_total"] == (n + 1) * il,
                  f"server prompt tokens grew {d}")
            check(d["vllm:request_success_total"] == n + 1, f"server requests {d}")
            check(d["vllm:generation_tokens_total"] == (n + 1) * ol, f"server generated tokens grew {d}")

            # A sweep: 2 input lengths x 2 rates, chat endpoint, concurrency cap.
            sweep = os.path.join(tmp, "sweep")
            p = bench(gk, "serve", "--base-url", url, "--model", "tiny", "--tokenizer", model,
                      "--endpoint", "/v1/chat/completions", "--input-lens", "24,48", "--random-output-len", "4",
                      "--num-prompts", "6", "--request-rate", "8,inf", "--max-concurrency", "4",
                      "--temperature", "0", "--save-result", "--result-dir", sweep, "--label", "A")
            check("Sweep Summary" in p.stdout and "saturat" in p.stdout, f"no sweep summary:\n{p.stdout}")
            check("Client-side Queueing" not in p.stdout, "client queue stats are opt-in (as vLLM)")
            points = sorted(glob.glob(os.path.join(sweep, "A-*qps-*.json")))
            summaries = glob.glob(os.path.join(sweep, "sweep-A-tiny-*.json"))
            check(len(points) == 4 and len(summaries) == 1, f"sweep files: {os.listdir(sweep)}")
            s = json.load(open(summaries[0]))
            check(s["gemmakit_sweep"] == 1 and len(s["points"]) == 4 and len(s["summary"]) == 2, "sweep summary shape")
            for pt in s["points"]:
                check(pt["completed"] == 6 and pt["failed"] == 0, f"sweep point {pt}")
                check(pt["max_concurrent_requests"] <= 4, "the concurrency cap holds")
            # Compare: two sweeps and two points.
            plots = os.path.join(tmp, "plots")
            p = bench(gk, "compare", summaries[0], summaries[0], "--labels", "TPU,GPU", "--plots-dir", plots)
            check("| best output throughput" in p.stdout or "output throughput" in p.stdout, f"compare:\n{p.stdout}")
            svgs = sorted(os.listdir(plots))
            check(any(f.startswith("throughput_vs_rate") for f in svgs) and any(f.startswith("ttft_vs_rate") for f in svgs),
                  f"plots: {svgs}")
            for f in svgs:
                text = open(os.path.join(plots, f)).read()
                check(text.startswith("<svg") and text.rstrip().endswith("</svg>") and "TPU" in text, f"{f} is no SVG")
            p = bench(gk, "compare", files[0], points[0], "--labels", "one,two")
            check("| output throughput (tok/s) |" in p.stdout, f"point compare:\n{p.stdout}")

            # jsonl replay of verilog-eval prompts.
            ve = os.path.join(SHARED, "verilog-eval")
            prompts = sorted(glob.glob(os.path.join(ve, "**", "*_prompt.txt"), recursive=True))[:5]
            if prompts:
                jl = os.path.join(tmp, "ve.jsonl")
                with open(jl, "w") as f:
                    for path in prompts:
                        f.write(json.dumps({"prompt": open(path).read()[:600], "output_len": 5}) + "\n")
                jout = os.path.join(tmp, "jsonl")
                bench(gk, "serve", "--base-url", url, "--dataset-name", "jsonl", "--dataset-path", jl,
                      "--tokenizer", model, "--num-prompts", "5", "--ignore-eos", "--temperature", "0",
                      "--save-result", "--save-detailed", "--result-dir", jout)
                jr = json.load(open(glob.glob(os.path.join(jout, "*.json"))[0]))
                check(jr["completed"] == 5 and jr["output_lens"] == [5] * 5, f"jsonl run: {jr['errors']}")
            else:
                print("skip: no ../shared/verilog-eval prompts here (CI has them)")

            # Bad input: one line, status 1.
            for bad in (["--request-rate", "0"], ["--request-rate", "fast"], ["--base-url", "https://x"],
                        ["--endpoint", "/v1/embeddings"], ["--goodput", "ttft:-1"], ["--burstiness", "nan"],
                        ["--percentile-metrics", "latency"], ["--dataset-name", "sharegpt"],
                        ["--dataset-name", "jsonl", "--dataset-path", "/nonexistent.jsonl"],
                        ["--model", "no-such-model"]):
                base = [] if "--base-url" in bad else ["--base-url", url]
                p = bench(gk, "serve", *base, "--tokenizer", model, "--num-prompts", "2",
                          "--random-input-len", "8", "--random-output-len", "2", "--ready-check-timeout-sec", "5",
                          *bad, expect_ok=False)
                lines = p.stderr.strip().splitlines()
                check(p.returncode == 1 and len(lines) == 1 and lines[0].startswith("gemmakit: error:"),
                      f"{bad}: want one error line and status 1, got {p.returncode}: {p.stderr!r}")
            p = bench(gk, "compare", files[0], expect_ok=False)
            check(p.returncode != 0, "compare needs two files")
    print("bench serve e2e: ok")


if __name__ == "__main__":
    main()
