#!/usr/bin/env python3
"""Multi-LoRA serving end to end: the real `gemmakit serve` with adapters, against the models
`gemmakit merge` makes from the same adapters, over HTTP (Python stdlib + numpy).

    serve_lora_e2e_test.py --gemmakit build/gemmakit [--workdir DIR] [--shared DIR]

On the tiny Gemma 4 model in f32 (so a merge rounds nothing that greedy decoding could see):
* each adapter's greedy text equals the merged model's, its logprobs within 1e-3, and differs
  from the base model's; a Qwix item converted from a PEFT adapter serves the same text;
* 16 concurrent requests of three adapters and the base: each text equals the text alone;
* /v1/models lists each adapter with its parent and path; an unknown model is vLLM's 404;
* the prefix cache never hands one adapter's KV blocks to another (nor to the base);
* vllm:lora_requests_info names the running adapters;
* runtime loading: load, use, unload, reload under concurrent traffic: no request fails that did
  not name the unloaded adapter, 0 KV blocks left; bad loads (outside --lora-root, missing, rank
  above --max-lora-rank, corrupt safetensors, another model's shapes, a taken name) are 400s;
  the routes are 404 without --allow-runtime-lora;
* --max-loras 1 with two adapters mixed: requests wait for the adapter slot, texts unchanged,
  with --max-cpu-loras 1 the other adapter is read again from disk;
* bad start-up flags: one line, exit 1;
* `bench serve --lora-modules` spreads requests over adapters; `eval verilog --base-url --model
  NAME` evaluates one adapter (with ../shared's verilog-eval).
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "oracle"))
sys.path.insert(0, os.path.join(HERE, "..", "bridge"))
from serve_harness import (TOKENIZER_DIR, ServeProcess, check, fail, metric_total, metrics, post_json,  # noqa: E402
                           request, sse_events, wait_idle)
from bridge_e2e_test import tensors, write_adapter  # noqa: E402

SERVER_ARGS = ["--max-model-len", "512", "--kv-cache-memory", "96MiB", "--max-num-seqs", "32"]
PROMPTS = ["The capital of France is", "module counter(input clk, input rst,", "Once upon a time there was",
           "def fibonacci(n):"]


def log(msg):
    print(msg, flush=True)


def run(gk, args, ok=True):
    env = dict(os.environ)
    env.setdefault("GEMMAKIT_TOKENIZER_DIR", TOKENIZER_DIR)
    p = subprocess.run([gk] + args, capture_output=True, text=True, env=env)
    if ok:
        check(p.returncode == 0, f"gemmakit {' '.join(args)}: exit {p.returncode}\n{p.stderr}")
    return p


def complete(url, model, prompt, max_tokens=16, logprobs=None):
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True}
    if logprobs is not None:
        body["logprobs"] = logprobs
    status, r = post_json(url, "/v1/completions", body)
    check(status == 200, f"{model!r} {prompt!r}: {status} {r}")
    return r["choices"][0]


def check_models(url, base, adapters):
    status, _, data = request(url, "GET", "/v1/models")
    check(status == 200, f"/v1/models: {status}")
    cards = {c["id"]: c for c in json.loads(data)["data"]}
    check(base in cards and cards[base].get("parent") is None, f"base card: {cards.get(base)}")
    for name, path in adapters.items():
        c = cards.get(name)
        check(c is not None, f"/v1/models lacks {name}: {list(cards)}")
        check(c["parent"] == base and c["root"] == path, f"{name}'s card: {c}")
    return cards


def check_unknown_model(url):
    status, r = post_json(url, "/v1/completions", {"model": "nope", "prompt": "x", "max_tokens": 2})
    check(status == 404 and r["error"]["type"] == "NotFoundError" and
          r["error"]["message"] == "The model `nope` does not exist.", f"unknown model: {status} {r}")


def check_prefix_cache_per_adapter(url):
    # Blocks of 16 tokens: a 100-token prompt fills 6; asking twice through one adapter hits.
    prompt = " ".join(f"w{i}" for i in range(60))
    def hits_of(model):
        before = metric_total(metrics(url), "vllm:prefix_cache_hits_total")
        complete(url, model, prompt, max_tokens=2)
        return metric_total(metrics(url), "vllm:prefix_cache_hits_total") - before
    hits_of("a0")
    check(hits_of("a0") > 0, "the same prompt through the same adapter should hit the prefix cache")
    check(hits_of("a1") == 0, "adapter a1 was handed adapter a0's KV blocks")
    base_first = hits_of("")
    check(base_first == 0, "the base model was handed an adapter's KV blocks")
    check(hits_of("a1") > 0, "a1's own blocks should be cached")
    log("ok: the prefix cache is keyed by adapter")


def check_lora_info_metric(url):
    done = threading.Event()
    def long_request():
        complete(url, "a1", "Stream for a while", max_tokens=200)
        done.set()
    t = threading.Thread(target=long_request)
    t.start()
    seen = False
    while not done.is_set() and not seen:
        for (name, labels), _ in metrics(url).items():
            if name == "vllm:lora_requests_info" and dict(labels).get("running_lora_adapters") == "a1":
                check(dict(labels).get("max_lora") == "4" and dict(labels).get("waiting_lora_adapters") == "",
                      f"lora_requests_info labels: {labels}")
                seen = True
    t.join()
    check(seen, "vllm:lora_requests_info never showed a1 running")
    log("ok: vllm:lora_requests_info names the running adapter")


def running_adapter(url, name):
    for (metric, labels), _ in metrics(url).items():
        if metric == "vllm:lora_requests_info" and name in dict(labels)["running_lora_adapters"].split(","):
            return True
    return False


def check_runtime_loading(url, root, bad):
    def load(name, path):
        return request(url, "POST", "/v1/load_lora_adapter", {"lora_name": name, "lora_path": path})

    def unload(name):
        return request(url, "POST", "/v1/unload_lora_adapter", {"lora_name": name})

    status, hdrs, body = load("a3", "a3")  # relative: under --lora-root
    check(status == 200 and body.decode() == "Success: LoRA adapter 'a3' added successfully.", f"load: {status} {body}")
    a3_text = complete(url, "a3", PROMPTS[0])["text"]
    base_text = complete(url, "", PROMPTS[0])["text"]
    check(a3_text != base_text, "a3 gives the base model's text")
    for name, path, want in [("a3", "a3", "has already been loaded"),
                             ("x", bad["outside"], "outside --lora-root"),
                             ("x", "../outside", "outside --lora-root"),
                             ("x", "missing", "no such adapter directory"),
                             ("x", "rank32", "above --max-lora-rank 16"),
                             ("x", "corrupt", "adapter_model.safetensors"),
                             ("x", "wide", "has shape"),
                             ("", "a3", "Both 'lora_name' and 'lora_path' must be provided.")]:
        status, _, body = load(name, path)
        r = json.loads(body)
        check(status == 400 and want in r["error"]["message"] and "\n" not in r["error"]["message"],
              f"load {name} {path}: {status} {r}")
    status, _, body = unload("never")
    check(status == 404 and "cannot be found" in json.loads(body)["error"]["message"], f"unload unknown: {status}")
    check("x" not in [c["id"] for c in json.loads(request(url, "GET", "/v1/models")[2])["data"]], "x listed")

    # Traffic on the base and two adapters the whole time; a3 unloaded while a request runs
    # through it, asked for while gone (404), loaded again, three times.
    stop = threading.Event()
    failures, counts = [], {"ok": 0}
    lock = threading.Lock()

    def traffic(i):
        model = ["", "a0", "a1"][i % 3]
        while not stop.is_set():
            events = sse_events(url, "/v1/completions", {"model": model, "prompt": PROMPTS[i % 4], "max_tokens": 12,
                                                         "temperature": 0, "ignore_eos": True, "stream": True})
            last = json.loads(events[-2])
            with lock:
                if last["choices"][0]["finish_reason"] != "length":
                    failures.append((model, last))
                counts["ok"] += 1

    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(traffic, i) for i in range(6)]
        try:  # a failed check exits: stop the traffic first, or the pool would wait for it forever
            for cycle in range(3):
                inflight = pool.submit(complete, url, "a3", PROMPTS[1], 40)
                while not running_adapter(url, "a3"):  # a3's request is in the engine
                    check(not inflight.done(), "the request through a3 ended before it was seen running")
                status, _, body = unload("a3")
                check(status == 200 and body.decode() == "Success: LoRA adapter 'a3' removed successfully.",
                      f"unload: {status} {body}")
                status, r = post_json(url, "/v1/completions", {"model": "a3", "prompt": "x", "max_tokens": 2})
                check(status == 404, f"a3 after unload: {status} {r}")
                check(inflight.result()["finish_reason"] == "length", "the request running through a3 was cut")
                status, _, body = load("a3", os.path.join(root, "a3"))
                check(status == 200, f"reload {cycle}: {status} {body}")
                check(complete(url, "a3", PROMPTS[0])["text"] == a3_text, "a3 reloaded gives another text")
        finally:
            stop.set()
        for f in futures:
            f.result()
    check(not failures, f"requests that did not name a3 failed: {failures[:3]}")
    check(counts["ok"] > 12, f"too little traffic during the reloads: {counts}")
    m = wait_idle(url)
    check(metric_total(m, "gemmakit:kv_blocks_used") == 0, "KV blocks leaked")
    log(f"ok: runtime load/unload/reload x3 under {counts['ok']} concurrent requests, 0 blocks left")


def check_bad_startup(gk, model, adapters, root):
    cases = [
        (["--lora", "x=/nonexistent"], "no such adapter directory"),
        (["--lora", f"x={adapters['rank32']}"], "above --max-lora-rank 16"),
        (["--lora", f"x={adapters['a0']}:alpha=8"], "alpha= is for Qwix items"),
        (["--lora", "noequals"], "is not NAME=DIR"),
        (["--lora-root", root], "--lora-root needs --allow-runtime-lora"),
        (["--served-model-name", "m", "--lora", f"m={adapters['a0']}"], "the name is the base model's"),
        (["--max-loras", "4", "--max-cpu-loras", "2", "--enable-lora"], "must be at least --max-loras"),
    ]
    for args, want in cases:
        p = run(gk, ["serve", "--model", model, "--port", "0"] + args, ok=False)
        lines = p.stderr.strip().splitlines()
        check(p.returncode == 1 and len(lines) == 1 and want in lines[0], f"serve {args}: {p.returncode} {p.stderr}")
    log("ok: bad start-up flags: one line, exit 1")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemmakit", required=True)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--shared", default=os.path.join(HERE, "..", "..", "..", "shared"))
    args = ap.parse_args()
    gk = args.gemmakit
    with tempfile.TemporaryDirectory(prefix="gk-serve-lora-") as tmp:
        w = args.workdir or tmp
        model = os.path.join(w, "tiny-f32")
        if not os.path.exists(os.path.join(model, "config.json")):
            run(gk, ["init", "--preset", "tiny", "--dtype", "f32", "--out", model, "--seed", "1"])
        base_t = tensors(model)
        root = os.path.join(w, "root")  # --lora-root: runtime loads come from here
        shutil.rmtree(root, ignore_errors=True)
        adapters = {}
        for name, r, alpha, seed, where in [("a0", 4, 8.0, 1, w), ("a1", 8, 8.0, 2, w), ("a2", 16, 32.0, 3, w),
                                            ("a3", 4, 4.0, 4, root), ("rank32", 32, 32.0, 5, root)]:
            adapters[name] = os.path.join(where, name)
            write_adapter(adapters[name], base_t, r=r, alpha=alpha, shared_kv_a=True, seed=seed)
        shutil.copytree(adapters["a3"], os.path.join(root, "corrupt"))
        with open(os.path.join(root, "corrupt", "adapter_model.safetensors"), "r+b") as f:
            f.truncate(200)
        # Another model's adapter: the tiny preset's tensors widened by one input column.
        def widened(entry):
            arr = entry[0] if isinstance(entry, tuple) else entry
            return (np.zeros((arr.shape[0], arr.shape[1] + 1), np.float32), "F32")
        wide_t = {n: widened(v) for n, v in base_t.items() if n.endswith("_proj.weight")}
        write_adapter(os.path.join(root, "wide"), wide_t, r=4, alpha=8.0, shared_kv_a=True, seed=6)
        merged = {}
        for name in ("a0", "a1", "a2"):
            merged[name] = os.path.join(w, "merged-" + name)
            shutil.rmtree(merged[name], ignore_errors=True)
            run(gk, ["merge", "--base", model, "--adapter", adapters[name], "--out", merged[name]])
        qwix = os.path.join(w, "qwix")
        shutil.rmtree(qwix, ignore_errors=True)
        run(gk, ["convert", "--from", "peft", "--to", "qwix", "--in", adapters["a0"], "--out", qwix, "--config", model,
                 "--step", "3"])

        lora_args = ["--lora", f"a0={adapters['a0']}", f"a1={adapters['a1']}", f"a2={adapters['a2']}",
                     "--lora", f"q0={os.path.join(qwix, '3')}:alpha=8", "--max-loras", "4",
                     "--allow-runtime-lora", "--lora-root", root]
        with ServeProcess(gk, model, SERVER_ARGS + lora_args) as s:
            url = s.base_url
            check("LoRA: 4 adapter(s) (a0, a1, a2, q0)" in s.log_text(), f"start-up LoRA line:\n{s.log_text()}")
            check_models(url, model, {"a0": adapters["a0"], "a1": adapters["a1"], "a2": adapters["a2"],
                                      "q0": os.path.join(qwix, "3")})
            check_unknown_model(url)
            alone = {(m, p): complete(url, m, p, logprobs=1) for m in ("", "a0", "a1", "a2") for p in PROMPTS}
            for m in ("a0", "a1", "a2"):
                check(any(alone[(m, p)]["text"] != alone[("", p)]["text"] for p in PROMPTS),
                      f"adapter {m} gives the base model's texts")
            for p in PROMPTS:
                check(complete(url, "q0", p)["text"] == alone[("a0", p)]["text"], f"Qwix form of a0 differs on {p!r}")
            log("ok: the Qwix form of a0 serves a0's text")
            # Mixed batch: 16 at once, each the same as alone.
            jobs = [(m, p) for m in ("", "a0", "a1", "a2") for p in PROMPTS]
            with ThreadPoolExecutor(16) as pool:
                mixed = list(pool.map(lambda j: complete(url, j[0], j[1], logprobs=1), jobs))
            for j, out in zip(jobs, mixed):
                check(out["text"] == alone[j]["text"], f"{j}: mixed batch text {out['text']!r} != alone "
                                                      f"{alone[j]['text']!r}")
            log("ok: 16 concurrent requests of three adapters and the base: each text as alone")
            check_prefix_cache_per_adapter(url)
            check_lora_info_metric(url)
            check_runtime_loading(url, root, {"outside": adapters["a0"]})

            # bench serve --lora-modules: every request through an adapter, none failing.
            res_dir = os.path.join(w, "bench")
            p = run(gk, ["bench", "serve", "--base-url", url, "--tokenizer", TOKENIZER_DIR, "--random-input-len", "16",
                         "--random-output-len", "4", "--num-prompts", "12", "--lora-modules", "a0", "a1", "a2",
                         "--lora-assignment", "round-robin", "--temperature", "0", "--save-result", "--result-dir",
                         res_dir, "--result-filename", "r.json"])
            with open(os.path.join(res_dir, "r.json")) as f:
                res = json.load(f)
            check(res["completed"] == 12 and res.get("failed", 0) == 0, f"bench serve --lora-modules: {res}")
            p = run(gk, ["bench", "serve", "--base-url", url, "--tokenizer", TOKENIZER_DIR, "--random-input-len", "16",
                         "--random-output-len", "4", "--num-prompts", "4", "--lora-modules", "nope",
                         "--temperature", "0", "--save-result", "--result-dir", res_dir, "--result-filename", "n.json"],
                    ok=False)
            with open(os.path.join(res_dir, "n.json")) as f:
                res = json.load(f)
            check(res["completed"] == 0 and res["failed"] == 4, f"bench serve with an unknown module: {res}")
            log("ok: bench serve --lora-modules")

            dataset = os.path.join(args.shared, "verilog-eval")
            if os.path.isdir(dataset):
                out = os.path.join(w, "eval")
                shutil.rmtree(out, ignore_errors=True)
                run(gk, ["eval", "verilog", "--dataset", dataset, "--base-url", url, "--model", "a2", "--problems",
                         "Prob001_zero,Prob002_m2014_q4i", "--n-samples", "1", "--max-tokens", "24", "--temperature",
                         "0", "--out", out])
                with open(os.path.join(out, "summary.json")) as f:
                    summary = json.load(f)
                check(summary.get("model") == "a2" and summary.get("problem_count") == 2 and summary.get("samples") == 2, f"eval --model a2: {summary}")
                log("ok: eval verilog --base-url --model a2")
            else:
                log(f"skip: eval verilog through an adapter ({dataset} not found)")
            m = wait_idle(url)
            check(metric_total(m, "gemmakit:kv_blocks_used") == 0, "KV blocks leaked")

        # Each merged model: the adapter's text and logprobs; no runtime routes without the flag.
        for name in ("a0", "a1", "a2"):
            with ServeProcess(gk, merged[name], SERVER_ARGS) as s:
                for p in PROMPTS:
                    got, want = complete(s.base_url, "", p, logprobs=1), alone[(name, p)]
                    check(got["text"] == want["text"], f"{name} {p!r}: merged {got['text']!r} != {want['text']!r}")
                    diff = np.max(np.abs(np.array(got["logprobs"]["token_logprobs"]) -
                                         np.array(want["logprobs"]["token_logprobs"])))
                    check(diff < 1e-3, f"{name} {p!r}: logprobs differ by {diff}")
                if name == "a0":
                    status, _, _ = request(s.base_url, "POST", "/v1/load_lora_adapter",
                                           {"lora_name": "a", "lora_path": adapters["a0"]})
                    check(status == 404, f"/v1/load_lora_adapter without --allow-runtime-lora: {status}")
        log("ok: each adapter's greedy text and logprobs equal its merged model's")

        # One adapter per step and one in memory: a0 and a1 mixed still give their texts.
        with ServeProcess(gk, model, SERVER_ARGS + ["--lora", f"a0={adapters['a0']}", f"a1={adapters['a1']}",
                                                    "--max-loras", "1", "--max-cpu-loras", "1"]) as s:
            jobs = [(m, p) for p in PROMPTS for m in ("a0", "a1", "")] * 2
            with ThreadPoolExecutor(12) as pool:
                outs = list(pool.map(lambda j: complete(s.base_url, j[0], j[1]), jobs))
            for j, out in zip(jobs, outs):
                check(out["text"] == alone[j]["text"], f"--max-loras 1 {j}: {out['text']!r}")
            check(metric_total(wait_idle(s.base_url), "gemmakit:kv_blocks_used") == 0, "KV blocks leaked")
        log("ok: --max-loras 1 --max-cpu-loras 1 with two adapters mixed")
        check_bad_startup(gk, model, adapters, root)
    log("PASS")


if __name__ == "__main__":
    main()
