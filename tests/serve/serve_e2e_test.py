#!/usr/bin/env python3
"""End-to-end test of `gemmakit serve` over HTTP (Python stdlib only): the real binary on a
loopback port with the tiny Gemma 4 model (random weights, real tokenizer).

    serve_e2e_test.py --gemmakit build/gemmakit [--workdir DIR]

Covers every endpoint, streaming == non-streaming greedy text, stop strings, n, logprobs,
bad input (each answered with an OpenAI error while the server keeps serving), the API key,
greedy requests alone == among 16 concurrent others (prefix caching and chunked prefill on, and
both off with bf16 KV), clients that hang up mid-stream (blocks freed: gemmakit:kv_blocks_used
back to 0), 200
requests with random hang-ups, and SIGTERM while a request streams (it completes, exit 0).

On a GPU (GEMMAKIT_SERVE_EXTRA_ARGS names --device cuda) the two servers that check batched ==
alone run --batch-invariant: as vLLM's, the GPU's default (cuBLASLt's per-shape algorithms,
attention split by the batch) does not promise it; the CPU's does, without the flag.
"""

import argparse
import json
import os
import random
import signal
import socket
import sys
import tempfile
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_harness import (ServeProcess, check, fail, make_tiny_model, metric_total, metrics, post_json,  # noqa: E402
                           request, sse_events, wait_idle)

def server_args(max_num_seqs=32):
    return ["--max-model-len", "512", "--kv-cache-memory", "96MiB", "--max-num-seqs", str(max_num_seqs)]


SERVER_ARGS = server_args()
ON_GPU = "cuda" in os.environ.get("GEMMAKIT_SERVE_EXTRA_ARGS", "")
BATCH_INVARIANT = ["--batch-invariant"] if ON_GPU else []


def log(msg):
    print(msg, flush=True)


def stream_text(events, chat=False):
    """Concatenated text of choice 0, the finish chunk, the usage chunk (if any)."""
    check(events and events[-1] == "[DONE]", f"stream does not end with [DONE]: {events[-3:]}")
    text, finish, usage = "", None, None
    for ev in events[:-1]:
        c = json.loads(ev)
        check("error" not in c, f"error in stream: {ev}")
        if not c["choices"]:
            usage = c["usage"]
            continue
        ch = c["choices"][0]
        text += (ch["delta"].get("content") or "") if chat else ch["text"]
        if ch["finish_reason"] is not None:
            finish = ch
    return text, finish, usage


def raw_post(base_url, path, body):
    u = urllib.parse.urlparse(base_url)
    s = socket.create_connection((u.hostname, u.port), timeout=30)
    payload = json.dumps(body).encode()
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: {u.hostname}\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
    return s


def hang_up_after_events(base_url, path, body, events=1):
    s = raw_post(base_url, path, body)
    buf = b""
    while buf.count(b"data: ") < events:
        chunk = s.recv(4096)
        if not chunk:
            break
        buf += chunk
    s.close()
    return buf


# ---- the checks -----------------------------------------------------------------------------

def check_info_endpoints(url, model_dir):
    status, hdrs, body = request(url, "GET", "/health")
    check(status == 200 and body == b"", f"/health: {status} {body!r}")
    status, _, body = request(url, "GET", "/version")
    check(status == 200 and "version" in json.loads(body), f"/version: {status} {body!r}")
    status, _, body = request(url, "GET", "/v1/models")
    models = json.loads(body)
    check(status == 200 and models["object"] == "list", f"/v1/models: {body!r}")
    card = models["data"][0]
    check(card["id"] == model_dir and card["object"] == "model" and card["owned_by"] == "gemmakit", f"card {card}")
    check(card["root"] == model_dir and card["parent"] is None and card["max_model_len"] == 512, f"card {card}")
    m = metrics(url)
    for name in ["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                 "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:request_success_total",
                 "vllm:num_preemptions_total", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
                 "vllm:time_to_first_token_seconds_count", "vllm:inter_token_latency_seconds_count",
                 "vllm:e2e_request_latency_seconds_count", "vllm:request_queue_time_seconds_count",
                 "vllm:request_time_per_output_token_seconds_count", "gemmakit:kv_blocks_used",
                 "gemmakit:kv_blocks_total"]:
        check(any(n == name for n, _ in m), f"/metrics lacks {name}")
    check(all(dict(l).get("model_name") == model_dir for (n, l) in m if n.startswith("vllm:")),
          "every vllm: sample has model_name")
    check(metric_total(m, "gemmakit:kv_blocks_total") > 0, "kv_blocks_total")
    log("ok: /health /version /v1/models /metrics")


def check_tokenize(url):
    status, t = post_json(url, "/tokenize", {"prompt": "Hello world"})
    check(status == 200 and t["count"] == len(t["tokens"]) and t["max_model_len"] == 512, f"/tokenize {t}")
    check(t["tokens"][0] == 2, "BOS first with add_special_tokens (default)")
    status, d = post_json(url, "/detokenize", {"tokens": t["tokens"][1:]})
    check(status == 200 and d["prompt"] == "Hello world", f"/detokenize {d}")
    status, t2 = post_json(url, "/tokenize", {"prompt": "Hello world", "add_special_tokens": False})
    check(t2["tokens"] == t["tokens"][1:], "add_special_tokens false")
    status, c = post_json(url, "/tokenize", {"messages": [{"role": "user", "content": "Hi"}]})
    check(status == 200 and c["tokens"][:2] == [2, 105], f"chat tokenize {c}")
    log("ok: /tokenize /detokenize")


def check_stream_equals_nonstream(url):
    for prompt in ["module adder(", "The quick brown fox"]:
        body = {"prompt": prompt, "max_tokens": 24, "temperature": 0, "ignore_eos": True}
        status, full = post_json(url, "/v1/completions", body)
        check(status == 200, f"completion {status} {full}")
        ch = full["choices"][0]
        check(ch["finish_reason"] == "length" and full["usage"]["completion_tokens"] == 24, f"usage {full}")
        check(full["id"].startswith("cmpl-") and full["object"] == "text_completion", f"ids {full}")
        events = sse_events(url, "/v1/completions", dict(body, stream=True))
        text, finish, usage = stream_text(events)
        check(text == ch["text"], f"stream {text!r} != non-stream {ch['text']!r}")
        check(finish["finish_reason"] == "length" and usage is None, f"finish {finish}")
    body = {"messages": [{"role": "user", "content": "Write a Verilog counter"}], "max_completion_tokens": 20,
            "temperature": 0, "ignore_eos": True}
    status, full = post_json(url, "/v1/chat/completions", body)
    check(status == 200 and full["object"] == "chat.completion", f"chat {full}")
    msg = full["choices"][0]["message"]
    events = sse_events(url, "/v1/chat/completions",
                        dict(body, stream=True, stream_options={"include_usage": True}))
    first = json.loads(events[0])
    # The first chunk comes with the first token: the role rides on it, never alone.
    check(first["choices"][0]["delta"].get("role") == "assistant", f"first chunk {first}")
    check(first["choices"][0]["delta"].get("content") or first["choices"][0]["finish_reason"],
          f"first chunk carries no content: {first}")
    check(all("usage" in json.loads(e) for e in events[:-1]), "include_usage: usage key on every chunk")
    text, finish, usage = stream_text(events, chat=True)
    check(text == msg["content"], f"chat stream {text!r} != {msg['content']!r}")
    # Same counts; the second run may hit the prefix cache (cached_tokens > 0).
    check({k: usage[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")} ==
          {k: full["usage"][k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")},
          f"usage chunk {usage} != {full['usage']}")
    check(usage["prompt_tokens_details"]["cached_tokens"] >= 16, f"the repeated prompt hits the prefix cache {usage}")
    log("ok: streaming == non-streaming (greedy), usage chunk, role on first content")


def check_stop_strings(url):
    body = {"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0, "ignore_eos": True}
    status, full = post_json(url, "/v1/completions", body)
    text = full["choices"][0]["text"]
    check(len(text) >= 12, f"text too short for the stop test: {text!r}")
    k = len(text) // 2
    stop = text[k:k + 3]
    expected = text[:text.find(stop)]
    status, r = post_json(url, "/v1/completions", dict(body, stop=[stop]))
    ch = r["choices"][0]
    check(status == 200 and ch["text"] == expected, f"stop {stop!r}: {ch['text']!r} != {expected!r}")
    check(ch["finish_reason"] == "stop" and ch["stop_reason"] == stop, f"stop reason {ch}")
    status, r = post_json(url, "/v1/completions", dict(body, stop=stop, include_stop_str_in_output=True))
    check(r["choices"][0]["text"] == expected + stop, f"include_stop_str_in_output {r['choices'][0]['text']!r}")
    events = sse_events(url, "/v1/completions", dict(body, stop=[stop], stream=True))
    stext, finish, _ = stream_text(events)
    check(stext == expected and finish["stop_reason"] == stop, f"streamed stop {stext!r} {finish}")
    wait_idle(url)
    log(f"ok: stop strings ({stop!r})")


def check_n_and_seed(url):
    body = {"prompt": "Hello", "max_tokens": 8, "n": 2, "temperature": 1.0, "seed": 7, "ignore_eos": True}
    status, a = post_json(url, "/v1/completions", body)
    check(status == 200 and [c["index"] for c in a["choices"]] == [0, 1], f"n=2 {a}")
    check(a["usage"]["completion_tokens"] == 16, f"n=2 usage {a['usage']}")
    status, b = post_json(url, "/v1/completions", body)
    check([c["text"] for c in a["choices"]] == [c["text"] for c in b["choices"]], "seeded sampling is reproducible")
    events = sse_events(url, "/v1/completions", dict(body, stream=True))
    texts = {0: "", 1: ""}
    for ev in events[:-1]:
        for c in json.loads(ev)["choices"]:
            texts[c["index"]] += c["text"]
    check([texts[0], texts[1]] == [c["text"] for c in a["choices"]], f"streamed n=2 {texts}")
    log("ok: n=2, seed")


def check_logprobs(url):
    status, r = post_json(url, "/v1/completions",
                          {"prompt": "Hi", "max_tokens": 5, "logprobs": 3, "temperature": 0, "ignore_eos": True})
    lp = r["choices"][0]["logprobs"]
    check(status == 200 and set(lp) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"}, f"keys {lp}")
    check(len(lp["tokens"]) == 5 and len(lp["token_logprobs"]) == 5 and len(lp["text_offset"]) == 5, f"{lp}")
    check(all(1 <= len(t) <= 3 for t in lp["top_logprobs"]), f"top_logprobs {lp['top_logprobs']}")
    check(all(v <= 0 for v in lp["token_logprobs"]), "log-probabilities are <= 0")
    # Greedy: the sampled token is the best one.
    check(all(abs(max(t.values()) - v) < 1e-4 for t, v in zip(lp["top_logprobs"], lp["token_logprobs"])),
          f"greedy token is the top one: {lp}")
    status, r = post_json(url, "/v1/chat/completions",
                          {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4, "logprobs": True,
                           "top_logprobs": 2, "temperature": 0, "ignore_eos": True})
    content = r["choices"][0]["logprobs"]["content"]
    check(status == 200 and len(content) == 4, f"chat logprobs {r}")
    for e in content:
        check(set(e) == {"token", "logprob", "bytes", "top_logprobs"} and len(e["top_logprobs"]) == 2, f"{e}")
        check(e["bytes"] == list(e["token"].encode()), f"bytes {e}")
    log("ok: logprobs (completions and chat)")


def check_bad_input(url, model_dir):
    def alive():
        status, _, _ = request(url, "GET", "/health")
        check(status == 200, "server stopped serving after bad input")

    cases = [
        ("/v1/completions", b"{not json", 400, "not valid JSON"),
        ("/v1/completions", b'{"prompt": "\xff\xfe"}', 400, "UTF-8"),
        ("/v1/completions", b"[]", 400, "JSON object"),
        ("/v1/completions", {"prompt": "x", "max_tokens": "ten"}, 400, "must be an integer"),
        ("/v1/completions", {"prompt": "x", "max_tokens": -3}, 400, "at least 1"),
        ("/v1/completions", {"prompt": "x", "max_tokens": 0}, 400, "at least 1"),
        ("/v1/completions", {"prompt": "x", "max_tokens": 10 ** 12}, 400, "maximum context length is 512"),
        ("/v1/completions", {"prompt": "word " * 600}, 400, "maximum context length is 512"),
        ("/v1/completions", {"prompt": "x", "n": 0}, 400, "n must be at least 1"),
        ("/v1/completions", {"prompt": "x", "temperature": -1}, 400, "temperature"),
        ("/v1/completions", {"prompt": "x", "top_p": 0}, 400, "top_p"),
        ("/v1/completions", {"prompt": "x", "stream": "yes"}, 400, "boolean"),
        ("/v1/completions", {"prompt": [10 ** 10]}, 400, "not a token id"),
        ("/v1/completions", {"prompt": [300000]}, 400, "out of vocabulary"),
        ("/v1/completions", {}, 400, "'prompt' is required"),
        ("/v1/completions", {"model": "nope", "prompt": "x"}, 404, "The model `nope` does not exist."),
        ("/v1/chat/completions", {"messages": "hi"}, 400, "messages"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400,
         "not supported"),
        ("/detokenize", {"tokens": [300000]}, 400, "out of vocabulary"),
        # Hostile bodies (docs/RELIABILITY.md): a number too large for a double, nesting 100000 deep.
        ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "x"}], "seed": 1e999}', 400,
         "not valid JSON: number overflow"),
        ("/v1/completions", b'{"prompt": ' + b"[" * 100000 + b"]" * 100000 + b"}", 400, "nesting deeper than 512"),
        ("/tokenize", b'{"prompt": "x", "add_special_tokens": -1e400}', 400, "not valid JSON"),
    ]
    for path, body, want, part in cases:
        raw = body if isinstance(body, bytes) else None
        status, _, data = request(url, "POST", path, None if raw else body, raw_body=raw)
        check(status == want, f"{path} {body!r:.80}: status {status}, want {want}: {data[:300]!r}")
        err = json.loads(data)["error"]
        check(part in err["message"], f"{path} {body!r:.80}: message {err['message']!r} lacks {part!r}")
        check({"message", "type", "param", "code"} <= set(err), f"error object {err}")
        alive()
    # Unknown fields are ignored (vLLM warns and goes on).
    status, r = post_json(url, "/v1/completions", {"prompt": "x", "max_tokens": 2, "not_a_field": 1})
    check(status == 200, f"unknown field refused: {r}")
    status, _, _ = request(url, "GET", "/no/such/route")
    check(status == 404, "unknown route")
    alive()
    wait_idle(url)
    log(f"ok: {len(cases)} bad requests answered with OpenAI errors, server still serving")


def abort_count(m):
    return sum(v for (n, l), v in m.items()
               if n == "vllm:request_success_total" and dict(l)["finished_reason"] == "abort")


def check_disconnect(url):
    aborts0 = abort_count(metrics(url))
    got = hang_up_after_events(url, "/v1/chat/completions",
                               {"messages": [{"role": "user", "content": "Tell me a long story"}],
                                "max_tokens": 400, "ignore_eos": True, "stream": True}, events=2)
    check(b"data: " in got, f"no chunk before hanging up: {got[:300]!r}")
    m = wait_idle(url, timeout=10)
    check(abort_count(m) >= aborts0 + 1, "the hung-up stream counts as aborted")
    # A non-streaming client that hangs up is aborted as well.
    s = raw_post(url, "/v1/completions", {"prompt": "x", "max_tokens": 400, "ignore_eos": True})
    time.sleep(0.3)
    s.close()
    wait_idle(url, timeout=10)
    log("ok: clients that hang up (stream and non-stream) free their KV blocks at once")


def check_random_disconnects(url, count=200, seed=1):
    rng = random.Random(seed)
    plans = []
    for i in range(count):
        kind = rng.choice(["stream", "stream", "full", "stream-hangup", "full-hangup"])
        chat = rng.random() < 0.5
        body = {"max_tokens": rng.randint(1, 40), "ignore_eos": rng.random() < 0.7,
                "temperature": rng.choice([0, 1.0]), "seed": i}
        if rng.random() < 0.1:
            body["n"] = 2
        if chat:
            body["messages"] = [{"role": "user", "content": f"request {i}: " + "word " * rng.randint(0, 60)}]
        else:
            body["prompt"] = f"request {i}: " + "token " * rng.randint(0, 60)
        plans.append((kind, chat, body, rng.randint(1, 4), rng.random() * 0.2))
    done = {"ok": 0, "hangup": 0}
    lock = threading.Lock()

    def run(plan):
        kind, chat, body, events, delay = plan
        path = "/v1/chat/completions" if chat else "/v1/completions"
        if kind == "stream":
            text, finish, _ = stream_text(sse_events(url, path, dict(body, stream=True)), chat=chat)
            check(finish is not None, f"no finish chunk for {body}")
            key = "ok"
        elif kind == "full":
            status, r = post_json(url, path, body)
            check(status == 200, f"{status} {r}")
            key = "ok"
        elif kind == "stream-hangup":
            hang_up_after_events(url, path, dict(body, stream=True), events)
            key = "hangup"
        else:
            s = raw_post(url, path, body)
            time.sleep(delay)
            s.close()
            key = "hangup"
        with lock:
            done[key] += 1

    with ThreadPoolExecutor(max_workers=16) as pool:
        for f in [pool.submit(run, p) for p in plans]:
            f.result()
    m = wait_idle(url, timeout=30)
    check(metric_total(m, "gemmakit:kv_blocks_used") == 0, "KV blocks leaked")
    log(f"ok: {count} requests ({done['ok']} complete, {done['hangup']} hung up), 0 KV blocks used after")


def check_batched_equals_alone(url, label, others=16):
    """Greedy requests give the same text alone and among `others` concurrent ones."""
    probes = [{"prompt": "module counter(input clk,", "max_tokens": 24},
              {"messages": [{"role": "user", "content": "Write a Verilog adder"}], "max_tokens": 24},
              {"prompt": "assign y = " + "a & b | " * 40, "max_tokens": 16}]  # a longer prompt: chunked
    for p in probes:
        p.update(temperature=0, ignore_eos=True)

    def run(body):
        path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
        status, r = post_json(url, path, body)
        check(status == 200, f"{status} {r}")
        ch = r["choices"][0]
        return ch["message"]["content"] if "messages" in body else ch["text"]

    alone = [run(p) for p in probes]
    rng = random.Random(3)
    crowd = [{"prompt": "noise " * rng.randint(1, 80), "max_tokens": rng.randint(8, 40), "ignore_eos": True,
              "temperature": 1.0, "seed": i} for i in range(others)]
    with ThreadPoolExecutor(max_workers=others + len(probes)) as pool:
        futures = [pool.submit(run, b) for b in crowd[:others // 2]]
        mine = [pool.submit(run, p) for p in probes]
        futures += [pool.submit(run, b) for b in crowd[others // 2:]]
        together = [f.result() for f in mine]
        for f in futures:
            f.result()
    for a, t, p in zip(alone, together, probes):
        check(a == t, f"{label}: batched text differs from alone for {p}:\n{a!r}\n{t!r}")
    wait_idle(url)
    log(f"ok: greedy requests alone == among {others} concurrent others ({label})")


def check_concurrent_streams(url, count=80):
    def one(i):
        body = {"prompt": f"stream {i}", "max_tokens": 8, "ignore_eos": True, "stream": True}
        text, finish, _ = stream_text(sse_events(url, "/v1/completions", body))
        return finish["finish_reason"]

    with ThreadPoolExecutor(max_workers=count) as pool:
        reasons = list(pool.map(one, range(count)))
    check(reasons == ["length"] * count, f"concurrent streams: {reasons}")
    wait_idle(url)
    log(f"ok: {count} concurrent streams")


def check_queue_limit(gemmakit, model_dir):
    """A full queue answers 503 with an OpenAI error instead of growing; the rest complete."""
    with ServeProcess(gemmakit, model_dir, server_args(max_num_seqs=1) + ["--max-queue", "2"]) as s:
        body = {"prompt": "x", "max_tokens": 40, "ignore_eos": True}
        with ThreadPoolExecutor(max_workers=12) as pool:
            results = list(pool.map(lambda _: post_json(s.base_url, "/v1/completions", body), range(12)))
        codes = sorted(status for status, _ in results)
        check(503 in codes and 200 in codes and set(codes) <= {200, 503}, f"queue limit: {codes}")
        for status, r in results:
            if status == 503:
                check(r["error"]["code"] == 503 and "queue" in r["error"]["message"], f"503 body {r}")
        check(post_json(s.base_url, "/v1/completions", dict(body, max_tokens=2))[0] == 200, "serves after 503s")
        wait_idle(s.base_url)
    log(f"ok: --max-queue 2: {codes.count(503)} of 12 refused with 503, {codes.count(200)} served")


def check_api_key(gemmakit, model_dir):
    with ServeProcess(gemmakit, model_dir, SERVER_ARGS + ["--api-key", "s3cret", "--served-model-name", "tiny"]) as s:
        url = s.base_url
        body = {"model": "tiny", "prompt": "x", "max_tokens": 2}
        status, r = post_json(url, "/v1/completions", body)
        check(status == 401 and "error" in r, f"no key: {status} {r}")
        status, r = post_json(url, "/v1/completions", body, {"Authorization": "Bearer wrong"})
        check(status == 401, f"wrong key: {status}")
        status, r = post_json(url, "/v1/completions", body, {"Authorization": "Bearer s3cret"})
        check(status == 200 and r["model"] == "tiny", f"right key: {status} {r}")
        status, _, data = request(url, "GET", "/v1/models", headers={"Authorization": "Bearer s3cret"})
        check(json.loads(data)["data"][0]["id"] == "tiny", "served model name")
        check(request(url, "GET", "/v1/models")[0] == 401, "/v1/models needs the key")
        for path in ["/health", "/metrics", "/version"]:
            check(request(url, "GET", path)[0] == 200, f"{path} stays open")
    log("ok: --api-key (401 without or with a wrong key), --served-model-name")


def check_sigterm_drain(gemmakit, model_dir, server=ServeProcess):
    """server: how to start it (tests/dist: under mpirun, stopped through rank 0)."""
    s = server(gemmakit, model_dir, SERVER_ARGS)
    s.__enter__()
    u = urllib.parse.urlparse(s.base_url)
    import http.client
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    payload = json.dumps({"prompt": "x", "max_tokens": 60, "ignore_eos": True, "stream": True})
    conn.request("POST", "/v1/completions", payload, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    check(resp.status == 200, f"stream status {resp.status}")
    first = resp.readline()  # b"data: {...}\n" arrives with the first token
    check(first.startswith(b"data: "), f"first line {first!r}")
    code_holder = {}
    t = threading.Thread(target=lambda: code_holder.setdefault("code", s.terminate()))
    t.start()
    rest = (first + resp.read()).decode()
    t.join()
    events = [b[len("data: "):] for b in rest.split("\n\n") if b.startswith("data: ")]
    text, finish, _ = stream_text(events)
    check(finish["finish_reason"] == "length", f"drained stream did not complete: {finish}")
    tokens = sum(1 for e in events[:-1] if json.loads(e)["choices"])
    check(code_holder.get("code") == 0, f"exit status {code_holder.get('code')} after SIGTERM\n{s.log_text()}")
    check("SIGTERM" in s.log_text(), "shutdown logged")
    try:
        socket.create_connection((u.hostname, u.port), timeout=2).close()
        fail("still accepting connections after SIGTERM")
    except OSError:
        pass
    log(f"ok: SIGTERM while streaming: the stream completed ({tokens} chunks), exit status 0")


def check_second_signal_aborts(gemmakit, model_dir):
    s = ServeProcess(gemmakit, model_dir, SERVER_ARGS)
    s.__enter__()
    u = urllib.parse.urlparse(s.base_url)
    import http.client
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    conn.request("POST", "/v1/completions", json.dumps({"prompt": "x", "max_tokens": 400, "ignore_eos": True,
                                                        "stream": True}), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    first = resp.readline()
    check(first.startswith(b"data: "), f"first line {first!r}")
    s.proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    s.proc.send_signal(signal.SIGTERM)  # the second one aborts the request in flight
    rest = (first + resp.read()).decode()
    events = [b[len("data: "):] for b in rest.split("\n\n") if b.startswith("data: ")]
    text, finish, _ = stream_text(events)
    check(finish["finish_reason"] == "abort", f"second signal: {finish}")
    code = s.terminate()
    check(code == 0, f"exit status {code} after two signals\n{s.log_text()}")
    log("ok: a second SIGTERM aborts the requests in flight, exit status 0")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemmakit", required=True)
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="gk-serve-e2e-") as tmp:
        workdir = args.workdir or tmp
        model_dir = make_tiny_model(args.gemmakit, os.path.join(workdir, "tiny"))
        with ServeProcess(args.gemmakit, model_dir, SERVER_ARGS + BATCH_INVARIANT) as s:
            log_text = s.log_text()
            check("KV cache size:" in log_text and "Maximum concurrency for 512 tokens per request" in log_text,
                  f"start-up capacity lines missing:\n{log_text}")
            url = s.base_url
            check_info_endpoints(url, model_dir)
            check_tokenize(url)
            check_stream_equals_nonstream(url)
            check_stop_strings(url)
            check_n_and_seed(url)
            check_logprobs(url)
            check_bad_input(url, model_dir)
            check_disconnect(url)
            check_random_disconnects(url)
            check_concurrent_streams(url)
            check_batched_equals_alone(url, "prefix caching, chunked prefill, f16 KV")
            m = metrics(url)
            check(metric_total(m, "vllm:time_to_first_token_seconds_count") > 0, "TTFT histogram recorded")
            check(metric_total(m, "vllm:generation_tokens_total") > 0, "generation tokens counted")
        log("ok: SIGTERM on an idle server: exit status 0")
        with ServeProcess(args.gemmakit, model_dir, SERVER_ARGS + [
                "--no-enable-prefix-caching", "--no-enable-chunked-prefill", "--kv-cache-dtype", "bf16",
                "--block-size", "4"] + BATCH_INVARIANT) as s:
            check("bf16" in s.log_text(), f"bf16 KV not reported:\n{s.log_text()}")
            check_batched_equals_alone(s.base_url, "no prefix caching, whole prefills, bf16 KV, blocks of 4")
        check_queue_limit(args.gemmakit, model_dir)
        check_api_key(args.gemmakit, model_dir)
        with ServeProcess(args.gemmakit, model_dir, SERVER_ARGS + ["--reject-unknown-fields"]) as s:
            status, r = post_json(s.base_url, "/v1/completions", {"prompt": "x", "max_tokens": 2, "max_tokenz": 5})
            check(status == 400 and "max_tokenz" in r["error"]["message"] and r["error"]["param"] == "max_tokenz",
                  f"--reject-unknown-fields: {status} {r}")
            status, r = post_json(s.base_url, "/v1/completions", {"prompt": "x", "max_tokens": 2})
            check(status == 200, f"known fields still served: {status} {r}")
        log("ok: --reject-unknown-fields answers 400 naming the field")
        check_sigterm_drain(args.gemmakit, model_dir)
        check_second_signal_aborts(args.gemmakit, model_dir)
    log("PASS")


if __name__ == "__main__":
    main()
