#!/usr/bin/env python3
"""Serving throughput and TTFT of `gemmakit serve` at several concurrency levels.

Starts the server on a loopback port (or uses --base-url), then for each concurrency C sends
C * --rounds streamed /v1/completions requests, C at a time, each a random prompt of
--input-len token ids with ignore_eos and --output-len tokens, and prints output tokens/s,
TTFT median and p99, and the ratio of throughput to the single-request (C=1) figure.
Stdlib only. The real bench client (`gemmakit bench serve`) is a separate issue; this is the
script the serve issue asked for until it lands.

  bench/serve_load.py --gemmakit build/gemmakit --model /tmp/g270 --concurrency 1,4,16,64
"""
import argparse
import http.client
import json
import random
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse


def start_server(args):
    cmd = [args.gemmakit, "serve", "--model", args.model, "--port", "0", "--max-model-len",
           str(args.input_len + args.output_len + 16), "--max-num-seqs", str(max(args.levels))] + args.server_arg
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 300
    lines = []
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(r"listening on (http://[\d.]+:\d+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
            return proc, m.group(1), "".join(lines)
    proc.kill()
    sys.exit("server did not start:\n" + "".join(lines))


def one_request(url, prompt, output_len):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=600)
    body = {"prompt": prompt, "max_tokens": output_len, "ignore_eos": True, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:200]}")
    ttft, tokens = None, 0
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        if chunk.get("choices") and ttft is None:
            ttft = time.perf_counter() - t0
        if chunk.get("usage"):
            tokens = chunk["usage"]["completion_tokens"]
    conn.close()
    return ttft, tokens, time.perf_counter() - t0


def run_level(url, c, args, rng):
    prompts = [[rng.randrange(300, 200000) for _ in range(args.input_len)] for _ in range(c * args.rounds)]
    results, lock, it = [], threading.Lock(), iter(prompts)

    def worker():
        while True:
            with lock:
                p = next(it, None)
            if p is None:
                return
            r = one_request(url, p, args.output_len)
            with lock:
                results.append(r)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(c)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    ttfts = sorted(r[0] for r in results)
    out_tokens = sum(r[1] for r in results)
    p99 = ttfts[min(len(ttfts) - 1, int(round(0.99 * (len(ttfts) - 1))))]
    return out_tokens / wall, statistics.median(ttfts) * 1000, p99 * 1000


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemmakit", default="build/gemmakit")
    ap.add_argument("--model")
    ap.add_argument("--base-url")
    ap.add_argument("--concurrency", default="1,4,16,64")
    ap.add_argument("--rounds", type=int, default=2, help="requests per concurrency slot")
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--server-arg", action="append", default=[], help="extra flag for gemmakit serve")
    args = ap.parse_args()
    args.levels = [int(x) for x in args.concurrency.split(",")]
    proc = None
    url = args.base_url
    if not url:
        proc, url, banner = start_server(args)
        print(banner.strip())
    rng = random.Random(0)
    one_request(url, [rng.randrange(300, 200000) for _ in range(8)], 4)  # warm-up
    print(f"{'concurrency':>11} {'out tok/s':>10} {'x single':>9} {'TTFT med ms':>12} {'TTFT p99 ms':>12}")
    base = None
    for c in args.levels:
        tput, med, p99 = run_level(url, c, args, rng)
        base = base or tput
        print(f"{c:>11} {tput:>10.1f} {tput / base:>9.2f} {med:>12.1f} {p99:>12.1f}", flush=True)
    if proc:
        proc.terminate()
        proc.wait(timeout=60)


if __name__ == "__main__":
    main()
