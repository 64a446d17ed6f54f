#!/usr/bin/env python3
"""Soak `gemmakit serve` under overload (a benchmark, not a test). Python 3 stdlib only.

Starts the server itself, measures the request rate it sustains (closed loop, well-formed requests),
then for --duration seconds sends a Poisson stream of requests at --multiplier times that rate,
mixing in clients that hang up at random points and malformed requests, over raw sockets. Every
--sample-every seconds it samples the server's RSS, threads, open descriptors and /metrics. At the
end it waits for the server to drain and reports: requests sent by kind, served (2xx), errors by
HTTP status, connection errors, hang-ups, client drops, crashes, RSS start/peak/end, KV blocks in
use when idle, and the server's exit status after SIGTERM.

    bench/soak_serve.py --gemmakit build/gemmakit --model /tmp/tiny --duration 60
    nice -n 10 bench/soak_serve.py --gemmakit G --model M --duration 1800 --json-out soak.json

Make a small model with `gemmakit init --preset tiny --out DIR` (GEMMAKIT_TOKENIZER_DIR pointing
at build/tokenizer/gemma3). The server is pinned to --server-cpus (default: the last CPU) and the
client to the other CPUs, so a 2-core machine stays usable.

Exit status: 0 when the run passed; 1 when the server crashed (died during the run), was not idle
with 0 KV blocks in use after draining, did not drain, did not answer a well-formed request after
the soak, or did not exit 0 on SIGTERM; 2 on a usage or start-up error.
"""

import argparse
import atexit
import collections
import datetime
import http.client
import json
import os
import platform
import random
import re
import shlex
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

DEFAULT_SERVER_ARGS = "--threads 1 --max-model-len 512 --kv-cache-memory 16MiB --max-queue 128"
LISTEN_RE = re.compile(r"listening on http://([^\s:]+):(\d+)")
MAX_BODY = 64 << 20  # the server's request body limit (HttpServerOptions::max_body_bytes)

WORDS = ("the of and to in is you that it he was for on are as with his they at be this have from or one had by "
         "word but not what all were we when your can said there use an each which she do how their if will up "
         "other about out many then them these so some her would make like him into time has look two more write "
         "go see number no way could people my than first water been call who oil its now find long down day did "
         "get come made may part river engine kernel tensor cache block server request stream token model").split()
SYSTEM_PROMPTS = [" ".join(random.Random(i).choices(WORDS, k=60 + 10 * i)) for i in range(4)]


# ---- raw HTTP over a socket ------------------------------------------------------------------------------

class HangUp(Exception):
    """The client hung up on purpose."""


class Conn:
    """One TCP connection; reads an HTTP/1.1 response by hand so the client can stop anywhere."""

    def __init__(self, addr, timeout):
        self.sock = socket.create_connection(addr, timeout=min(timeout, 10))
        self.sock.settimeout(timeout)
        self.buf = b""

    def send(self, data):
        self.sock.sendall(data)

    def close(self, rst=False):
        try:
            if rst:  # an abortive close: the peer sees a reset instead of a FIN
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.sock.close()
        except OSError:
            pass

    def _fill(self):
        data = self.sock.recv(65536)
        if not data:
            raise EOFError("connection closed by the server")
        self.buf += data

    def read_head(self):
        """Returns (status, headers with lower-case names); EOFError if closed before a full head."""
        while b"\r\n\r\n" not in self.buf:
            if len(self.buf) > 1 << 20:
                raise ValueError("response head over 1 MiB")
            self._fill()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise ValueError(f"bad status line {lines[0][:80]!r}")
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        return int(parts[1]), headers

    def iter_body(self, headers):
        """Yields the body in pieces as they arrive (Content-Length, chunked, or until close)."""
        if headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                while b"\r\n" not in self.buf:
                    self._fill()
                line, self.buf = self.buf.split(b"\r\n", 1)
                size = int(line.split(b";")[0].strip() or b"x", 16)
                while len(self.buf) < size + 2:
                    self._fill()
                piece, self.buf = self.buf[:size], self.buf[size + 2:]
                if size == 0:
                    return
                yield piece
        elif "content-length" in headers:
            left = int(headers["content-length"])
            while left > 0:
                if not self.buf:
                    self._fill()
                piece, self.buf = self.buf[:left], self.buf[left:]
                left -= len(piece)
                yield piece
        else:
            while True:
                if self.buf:
                    piece, self.buf = self.buf, b""
                    yield piece
                try:
                    self._fill()
                except EOFError:
                    return

    def read_until_close(self, limit=1 << 20):
        try:
            while len(self.buf) < limit:
                self._fill()
        except EOFError:
            pass
        return self.buf


def http_request(method, path, body=b"", headers=None, content_length=None):
    h = {"Host": "127.0.0.1", "Connection": "close"}
    if body or method == "POST":
        h["Content-Type"] = "application/json"
        h["Content-Length"] = str(len(body) if content_length is None else content_length)
    h.update(headers or {})
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
    return head.encode("latin-1") + body


# ---- the request mix -------------------------------------------------------------------------------------

class Mix:
    """Builds requests. Each is (category, kind, action, args): category is normal, hangup or malformed."""

    def __init__(self, model, max_model_len, max_prompt_words, max_tokens):
        self.model = model
        self.max_model_len = max_model_len
        self.max_prompt_words = max(4, min(max_prompt_words, max_model_len // 4))
        self.max_tokens = max(2, min(max_tokens, max_model_len // 4))

    def words(self, rng, n):
        return " ".join(rng.choice(WORDS) for _ in range(n))

    def normal_body(self, rng, stream=None, chat=None):
        """A well-formed chat or completions request that fits max_model_len."""
        chat = rng.random() < 0.5 if chat is None else chat
        stream = rng.random() < 0.5 if stream is None else stream
        n_words = rng.randint(4, self.max_prompt_words)
        b = {"model": self.model, "max_tokens": rng.randint(1, self.max_tokens), "stream": stream}
        if chat:
            msgs = []
            if rng.random() < 0.5:  # shared prefixes: exercises prefix caching and shared KV blocks
                msgs.append({"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
            msgs.append({"role": "user", "content": self.words(rng, n_words)})
            b["messages"] = msgs
            if rng.random() < 0.2:
                b["max_completion_tokens"] = b.pop("max_tokens")
            if rng.random() < 0.1:
                b["logprobs"], b["top_logprobs"] = True, rng.randint(0, 3)
        else:
            r = rng.random()
            if r < 0.15:
                b["prompt"] = [rng.randint(10, 200000) for _ in range(n_words)]
            elif r < 0.25:
                b["prompt"] = [self.words(rng, max(1, n_words // 2)) for _ in range(2)]
            else:
                prefix = rng.choice(SYSTEM_PROMPTS) + " " if rng.random() < 0.3 else ""
                b["prompt"] = prefix + self.words(rng, n_words)
            if rng.random() < 0.1:
                b["logprobs"] = rng.randint(0, 3)
        if rng.random() < 0.5:
            b["temperature"] = rng.choice([0.0, 0.7, 1.0, 1.5])
        if rng.random() < 0.3:
            b["top_p"], b["top_k"] = rng.choice([0.5, 0.9, 1.0]), rng.choice([-1, 1, 40])
        if rng.random() < 0.3:
            b["seed"] = rng.randint(0, 2**31)
        if rng.random() < 0.2:
            b["stop"] = rng.choice(["\n\n", ["the", "and"], "."])
        if rng.random() < 0.2:
            b["ignore_eos"] = True
        if rng.random() < 0.1:
            b["n"] = 2
        if stream and rng.random() < 0.5:
            b["stream_options"] = {"include_usage": True}
        path = "/v1/chat/completions" if chat else "/v1/completions"
        return path, b

    def normal(self, rng):
        path, b = self.normal_body(rng)
        kind = ("chat" if "chat" in path else "completion") + ("_stream" if b["stream"] else "")
        return "normal", kind, "full", (http_request("POST", path, json.dumps(b).encode()), b)

    def hangup(self, rng):
        r = rng.random()
        if r < 0.15:
            return "hangup", "hangup_connect_only", "connect_close", (rng.random() < 0.5,)
        if r < 0.3:
            return "hangup", "hangup_stall_headers", "stall", (rng.uniform(0.2, 7.0),)
        path, b = self.normal_body(rng, stream=r >= 0.6)
        data = json.dumps(b).encode()
        req = http_request("POST", path, data)
        if r < 0.45:
            cut = rng.randint(1, len(req) - 1)
            return "hangup", "hangup_mid_body", "partial_close", (req[:cut], rng.random() < 0.5)
        if r < 0.6:
            return "hangup", "hangup_while_waiting", "wait_close", (req, rng.uniform(0, 3.0), rng.random() < 0.5)
        if r < 0.75:
            return "hangup", "hangup_after_headers", "head_close", (req, rng.random() < 0.5)
        asked = b.get("max_tokens", b.get("max_completion_tokens", 2))
        return "hangup", "hangup_mid_stream", "stream_close", (req, rng.randint(1, asked // 2 + 1), rng.random() < 0.5)

    def malformed(self, rng):
        m = self.model
        kinds = ["bad_json", "wrong_types", "bad_max_tokens", "unknown_model", "invalid_utf8", "truncated_body",
                 "oversized_body", "wrong_method_or_path", "garbage_bytes", "oversized_headers", "deep_nesting",
                 "bad_framing",
                 "prompt_too_long"]
        kind = rng.choice(kinds)
        chat = rng.random() < 0.5
        path = "/v1/chat/completions" if chat else "/v1/completions"
        base = {"model": m, "max_tokens": 8}
        base.update({"messages": [{"role": "user", "content": "hello"}]} if chat else {"prompt": "hello"})
        post = lambda body: ("malformed", kind, "full", (http_request("POST", path, body), None))  # noqa: E731
        if kind == "bad_json":
            good = json.dumps(dict(base, stream=rng.random() < 0.5)).encode()
            return post(rng.choice([good[:rng.randint(0, len(good) - 1)], good.replace(b":", b"=", 1),
                                    b"{'model': 'x'}", b"null", b"[]", b'"just a string"', b"{" * 3 + b"}",
                                    good + b"}", b"{\"model\":\"" + m.encode() + b"\",}", b"NaN"]))
        if kind == "wrong_types":
            common = [{"max_tokens": "ten"}, {"temperature": "hot"}, {"stream": "yes"}, {"n": "two"}, {"stop": 5},
                      {"model": ["x"]}, {"top_p": [1]}, {"seed": "s"}, {"n": 0}, {"n": 1000},
                      {"stream_options": "x"}, {"top_k": -7}, {"temperature": -1}, {"logit_bias": {"5": 1}}]
            if chat:
                own = [{"messages": "hello"}, {"messages": [{"role": 5, "content": "x"}]}, {"messages": []},
                       {"messages": [{"role": "user", "content": 5}]}, {"messages": [["user", "x"]]},
                       {"messages": None}, {"logprobs": "many"}, {"top_logprobs": 1000, "logprobs": True}]
            else:
                own = [{"prompt": 5}, {"prompt": {"a": 1}}, {"prompt": [-1, 5]}, {"prompt": [2**40]}, {"prompt": []},
                       {"prompt": [1.5, 2]}, {"prompt": None}, {"logprobs": "many"}, {"echo": "x"}]
            return post(json.dumps(dict(base, **rng.choice(common + own))).encode())
        if kind == "bad_max_tokens":
            v = rng.choice([-1, 0, -2**63, 2**63, 10**12, 10**30, 1.5, 1e308, "1e9", True])
            return post(json.dumps(dict(base, max_tokens=v)).encode())
        if kind == "unknown_model":
            name = rng.choice(["gpt-4", "../" + m, m + "x", "\u00e9" * 300])
            return post(json.dumps(dict(base, model=name)).encode())
        if kind == "invalid_utf8":
            junk = rng.choice([b"\xff\xfe", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\xe2\x82",
                               b"\x80"])
            body = json.dumps(base).encode().replace(b"hello", b"hel" + junk + b"lo")
            return post(body)
        if kind == "truncated_body":
            body = json.dumps(base).encode()
            cut = rng.randint(0, len(body) - 1)
            req = http_request("POST", path, body[:cut], content_length=len(body) + rng.randint(1, 10000))
            return "malformed", kind, "truncated", (req, rng.random() < 0.5)
        if kind == "oversized_body":
            cl = rng.choice([MAX_BODY + 1, MAX_BODY * 4, 10**12, 2**63 - 1])
            head = http_request("POST", path, b"", content_length=cl)
            return "malformed", kind, "oversized", (head, rng.choice([0, 4096, 256 << 10, 1 << 20]))
        if kind == "wrong_method_or_path":
            method, p = rng.choice([("GET", "/v1/chat/completions"), ("PUT", "/v1/completions"),
                                    ("DELETE", "/v1/models"), ("PATCH", path), ("POST", "/v1/models"),
                                    ("POST", "/v1/nothing"), ("GET", "/../../etc/passwd"), ("GET", "/%zz%00"),
                                    ("POST", "/v1/completions/extra"), ("OPTIONS", "*"), ("BREW", "/coffee")])
            body = json.dumps(base).encode() if method in ("POST", "PUT", "PATCH") else b""
            return "malformed", kind, "full", (http_request(method, p, body), None)
        if kind == "garbage_bytes":
            data = rng.choice([bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 4096))),
                               b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(256)),
                               b"GET / HTTP/9.9\r\n\r\n", b"POST /v1/completions\r\n\r\n", b"\r\n\r\n",
                               b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes(64)])
            return "malformed", kind, "garbage", (data,)
        if kind == "oversized_headers":
            data = rng.choice([b"GET /health HTTP/1.1\r\nHost: x\r\nX: " + b"a" * rng.choice([9000, 100000, 1 << 20]),
                               b"GET /v1/models HTTP/1.1\r\n" + b"X-A: b\r\n" * rng.choice([5000, 50000]),
                               b"GET /" + b"a" * rng.choice([9000, 100000]) + b" HTTP/1.1\r\nHost: x"])
            return "malformed", kind, "garbage", (data + b"\r\n\r\n",)
        if kind == "deep_nesting":
            d = rng.randint(100, 20000)
            if rng.random() < 0.5:
                body = json.dumps(dict(base, messages=None, prompt=None)).encode().replace(
                    b"null", b"[" * d + b"]" * d, 1)
            else:
                body = b'{"model":"' + m.encode() + b'","messages":[{"role":"user","content":' + \
                    b'{"a":' * d + b"1" + b"}" * d + b"}]}"
            return post(body)
        if kind == "bad_framing":
            body = json.dumps(base).encode()
            variant = rng.randint(0, 4)
            if variant == 0:
                req = http_request("POST", path, body, {"Content-Length": "abc"})
            elif variant == 1:
                req = http_request("POST", path, body, {"Content-Length": "-5"})
            elif variant == 2:
                req = (f"POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n"
                       "zz\r\nabc\r\n0\r\n\r\n").encode()
            elif variant == 3:  # a well-formed chunked body: valid HTTP, should be served
                req = (f"POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
                       f"Transfer-Encoding: chunked\r\n\r\n{len(body):x}\r\n").encode() + body + b"\r\n0\r\n\r\n"
            else:
                req = (f"POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {len(body)}\r\n"
                       f"Content-Length: {len(body) + 7}\r\n\r\n").encode() + body
            return "malformed", kind, "full", (req, None)
        # prompt_too_long: well-formed JSON the server must refuse with 400
        if chat:
            big = dict(base, messages=[{"role": "user", "content": self.words(rng, self.max_model_len * 2)}])
        else:
            big = dict(base, prompt=[rng.randint(10, 1000) for _ in range(self.max_model_len + rng.randint(0, 100))])
        return post(json.dumps(big).encode())

    def pick(self, rng, weights):
        r = rng.random() * sum(weights)
        if r < weights[0]:
            return self.normal(rng)
        if r < weights[0] + weights[1]:
            return self.hangup(rng)
        return self.malformed(rng)


# ---- running one request ---------------------------------------------------------------------------------

def validate_ok(status, headers, body, expect):
    """For a 200 to a well-formed request: 'ok' or a reason it is not a valid answer."""
    if expect is None:
        return "ok"
    if expect.get("stream"):
        if "text/event-stream" not in headers.get("content-type", ""):
            return "invalid_200:content_type"
        text = body.decode("utf-8", "replace")
        events = [e[6:] for e in text.split("\n\n") if e.startswith("data: ")]
        if not events or events[-1] != "[DONE]":
            return "invalid_200:stream_without_done"
        for e in events[:-1]:
            if e.startswith('{"error"'):
                return "invalid_200:error_in_stream"
        return "ok"
    try:
        obj = json.loads(body)
    except ValueError:
        return "invalid_200:not_json"
    choices = obj.get("choices") if isinstance(obj, dict) else None
    if not isinstance(choices, list) or not choices:
        return "invalid_200:no_choices"
    want = expect.get("n", 1) * (len(expect["prompt"]) if isinstance(expect.get("prompt"), list)
                                 and expect["prompt"] and isinstance(expect["prompt"][0], str) else 1)
    if len(choices) != want:
        return f"invalid_200:choices_{len(choices)}_not_{want}"
    return "ok"


def run_one(addr, req, timeout, info=None):
    """Returns (outcome, seconds): outcome is an HTTP status (int), 'hung_up', or 'conn:<what>'."""
    category, kind, action, args = req
    t0 = time.monotonic()
    conn = None
    try:
        conn = Conn(addr, timeout)
        if info is not None and "conns" in info:  # calibration: lets the caller hang up on it
            with info["lock"]:
                info["conns"].add(conn)
        if action == "full":
            data, expect = args
            conn.send(data)
            status, headers = conn.read_head()
            body = b"".join(conn.iter_body(headers))
            if info is not None:
                info["body"] = body[:300]
            if status == 200:
                v = validate_ok(status, headers, body, expect)
                if v != "ok":
                    return v, time.monotonic() - t0
            return status, time.monotonic() - t0
        if action == "connect_close":
            conn.close(rst=args[0])
            return "hung_up", 0.0
        if action == "stall":
            conn.send(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le")
            time.sleep(args[0])
            conn.close(rst=True)
            return "hung_up", time.monotonic() - t0
        if action == "partial_close":
            conn.send(args[0])
            conn.close(rst=args[1])
            return "hung_up", time.monotonic() - t0
        if action == "wait_close":
            data, wait, rst = args
            conn.send(data)
            conn.sock.settimeout(max(wait, 0.001))
            try:
                status, headers = conn.read_head()
            except socket.timeout:
                conn.close(rst=rst)
                return "hung_up", time.monotonic() - t0
            conn.sock.settimeout(timeout)
            body = b"".join(conn.iter_body(headers))
            return status, time.monotonic() - t0
        if action == "head_close":
            data, rst = args
            conn.send(data)
            status, headers = conn.read_head()
            conn.close(rst=rst)
            return "hung_up", time.monotonic() - t0
        if action == "stream_close":
            data, after_events, rst = args
            conn.send(data)
            status, headers = conn.read_head()
            if status != 200:
                b"".join(conn.iter_body(headers))
                return status, time.monotonic() - t0
            seen = 0
            for piece in conn.iter_body(headers):
                seen += piece.count(b"data: ")
                if seen >= after_events:
                    conn.close(rst=rst)
                    return "hung_up", time.monotonic() - t0
            return 200, time.monotonic() - t0
        if action == "truncated":
            data, shut = args
            conn.send(data)
            if shut:
                conn.sock.shutdown(socket.SHUT_WR)
            status, headers = conn.read_head()
            b"".join(conn.iter_body(headers))
            return status, time.monotonic() - t0
        if action == "oversized":
            head, extra = args
            conn.send(head)
            chunk = b"x" * 65536
            sent = 0
            try:
                while sent < extra:
                    conn.send(chunk)
                    sent += len(chunk)
            except OSError:
                pass  # the server may answer 413 and close before the client has sent its part
            status, headers = conn.read_head()
            return status, time.monotonic() - t0
        if action == "garbage":
            conn.send(args[0])
            status, headers = conn.read_head()
            return status, time.monotonic() - t0
        raise RuntimeError(action)
    except socket.timeout:
        return "conn:timeout", time.monotonic() - t0
    except ConnectionRefusedError:
        return "conn:refused", time.monotonic() - t0
    except ConnectionResetError:
        return "conn:reset", time.monotonic() - t0
    except BrokenPipeError:
        return "conn:broken_pipe", time.monotonic() - t0
    except EOFError:
        return "conn:closed_without_response", time.monotonic() - t0
    except ValueError:
        return "conn:bad_response", time.monotonic() - t0
    except OSError as e:
        return f"conn:{type(e).__name__}", time.monotonic() - t0
    finally:
        if conn is not None:
            if info is not None and "conns" in info:
                with info["lock"]:
                    info["conns"].discard(conn)
            conn.close()


# Outcomes that are fine for each category (anything else is listed under "unexpected").
def expected(category, kind, outcome):
    if category == "hangup":
        return True
    if category == "normal":
        return outcome in (200, 503)
    if isinstance(outcome, int):  # a well-formed chunked body and many small headers are valid HTTP
        return 400 <= outcome < 500 or outcome == 503 or (
            kind in ("bad_framing", "oversized_headers") and outcome == 200)
    # the server may close instead of answering bytes that are not HTTP, or a body it cannot finish
    return outcome in ("conn:closed_without_response", "conn:reset", "conn:broken_pipe") and kind in (
        "garbage_bytes", "oversized_headers", "truncated_body", "oversized_body", "bad_framing")


# ---- bookkeeping -----------------------------------------------------------------------------------------

class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.sent = collections.Counter()            # kind -> count
        self.sent_cat = collections.Counter()        # category -> count
        self.outcomes = collections.defaultdict(collections.Counter)  # kind -> outcome -> count
        self.cat_of = {}
        self.drops = collections.Counter()           # category -> arrivals dropped by the client
        self.latency = collections.defaultdict(list)  # normal kind -> seconds, served requests
        self.inflight = 0
        self.examples = collections.defaultdict(list)  # "kind outcome" -> a few response bodies

    def record(self, req, outcome, secs, info=None):
        category, kind = req[0], req[1]
        with self.lock:
            self.outcomes[kind][outcome] += 1
            key = f"{kind} {outcome}"
            if not expected(category, kind, outcome) and len(self.examples[key]) < 3:
                sent = req[3][0] if isinstance(req[3][0], bytes) else b""
                self.examples[key].append({"request": (sent[:100] + b" ... " + sent[-160:] if len(sent) > 300
                                                       else sent).decode("latin-1"),
                                           "response": (info or {}).get("body", b"")[:200].decode("utf-8", "replace")})
            self.cat_of[kind] = category
            if category == "normal" and outcome == 200:
                self.latency[kind].append(secs)

    def totals(self):
        with self.lock:
            served = sum(c for o in self.outcomes.values() for k, c in o.items() if isinstance(k, int) and k < 300)
            done = sum(sum(o.values()) for o in self.outcomes.values())
            return dict(sent=sum(self.sent.values()), done=done, served=served, drops=sum(self.drops.values()),
                        inflight=self.inflight)


class Pool:
    """max_inflight worker threads; submit() drops the request when all are busy (counted by the caller)."""

    def __init__(self, addr, size, timeout, stats):
        self.addr, self.timeout, self.stats = addr, timeout, stats
        self.free = threading.Semaphore(size)
        self.jobs = collections.deque()
        self.cv = threading.Condition()
        self.stopping = False
        self.threads = [threading.Thread(target=self.work, daemon=True) for _ in range(size)]
        for t in self.threads:
            t.start()

    def submit(self, req, block=False):
        if not self.free.acquire(blocking=block):
            return False
        with self.stats.lock:
            self.stats.inflight += 1
            self.stats.sent[req[1]] += 1
            self.stats.sent_cat[req[0]] += 1
        with self.cv:
            self.jobs.append(req)
            self.cv.notify()
        return True

    def work(self):
        while True:
            with self.cv:
                while not self.jobs and not self.stopping:
                    self.cv.wait()
                if not self.jobs:
                    return
                req = self.jobs.popleft()
            info = {}
            outcome, secs = run_one(self.addr, req, self.timeout, info)
            self.stats.record(req, outcome, secs, info)
            with self.stats.lock:
                self.stats.inflight -= 1
            self.free.release()

    def join(self, timeout):
        with self.cv:
            self.stopping = True
            self.cv.notify_all()
        end = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0, end - time.monotonic()))
        return not any(t.is_alive() for t in self.threads)


# ---- the server ------------------------------------------------------------------------------------------

def proc_status(pid):
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in ("VmRSS", "VmHWM", "Threads"):
                    out[k] = int(v.split()[0])
        out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None
    return out


def proc_start_time(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def parse_metrics(text):
    out = collections.defaultdict(float)
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})? (\S+)$', line)
        if not m:
            continue
        name, labels = m.group(1), dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        v = float(m.group(4))
        out[name] += v
        for key in ("kv_group", "finished_reason"):
            if key in labels:
                out[f"{name}[{labels[key]}]"] += v
    return out


def get(addr, path, timeout=10):
    c = http.client.HTTPConnection(*addr, timeout=timeout)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def metrics(addr):
    status, body = get(addr, "/metrics")
    if status != 200:
        raise OSError(f"/metrics answered {status}")
    return parse_metrics(body.decode())


class Server:
    def __init__(self, cmd, cpus, log_path):
        self.cmd, self.cpus, self.log_path = cmd, cpus, log_path
        self.addr = None
        self.proc = None
        self.lock = threading.Lock()
        self.deaths = []  # (when, exit status) of each time the process was found dead
        self.expected_exit = False

    def start(self, timeout):
        cpus = self.cpus
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
        self.pid = self.proc.pid
        ready = threading.Event()

        def pump():
            for raw in self.proc.stdout:
                line = raw.decode("utf-8", "replace")
                self.log.write(line)
                self.log.flush()
                m = LISTEN_RE.search(line)
                if m and not ready.is_set():
                    self.addr = (m.group(1), int(m.group(2)))
                    ready.set()
            ready.set()

        self.reader = threading.Thread(target=pump, daemon=True)
        self.reader.start()
        if not ready.wait(timeout) or self.addr is None:
            self.proc.kill()
            print(f"soak_serve: the server did not start: {shlex.join(self.cmd)}\n{self.log_tail()}", file=sys.stderr)
            sys.exit(2)
        self.start_time = proc_start_time(self.pid)
        end = time.monotonic() + timeout
        while True:  # /health answers 200 once the engine is up
            try:
                if get(self.addr, "/health", 5)[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > end:
                self.proc.kill()
                print(f"soak_serve: /health never answered 200\n{self.log_tail()}", file=sys.stderr)
                sys.exit(2)
            time.sleep(0.2)

    def alive(self):
        """False once the process died; each death is recorded once (the script never restarts it)."""
        code = self.proc.poll()
        if code is not None:
            with self.lock:
                if not self.deaths and not self.expected_exit:
                    self.deaths.append((datetime.datetime.now().isoformat(timespec="seconds"), code))
            return False
        return proc_start_time(self.pid) == self.start_time

    def log_tail(self, n=30):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def stop(self, timeout):
        """SIGTERM, wait for the drain; returns (exit status, seconds) or (None, s) if it had to be killed."""
        self.expected_exit = True
        t0 = time.monotonic()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            code = None
        self.reader.join(5)
        self.log.close()
        return code, time.monotonic() - t0


# ---- phases ----------------------------------------------------------------------------------------------

def calibrate(server, mix, seed, concurrency, seconds, timeout):
    """Closed loop with well-formed requests only: completed requests/s at each concurrency.

    Steady state only: the window opens once `c` requests have completed (every worker has come
    round once) and lasts at least `seconds` and at least `c` completions (at most 6 x `seconds`).
    The requests still open when it closes are hung up on (the next level starts clean)."""
    results = {}
    for ci, c in enumerate(concurrency):
        lock = threading.Lock()
        stop = threading.Event()
        conns = set()
        done = []  # completion times of 200s
        errors = collections.Counter()
        examples = {}

        def loop(wi):
            rng = random.Random(f"{seed}-calib-{ci}-{wi}")
            while not stop.is_set():
                req = mix.normal(rng)
                info = {"conns": conns, "lock": lock}
                outcome, _ = run_one(server.addr, req, timeout, info)
                with lock:
                    if stop.is_set():
                        return
                    if outcome == 200:
                        done.append(time.monotonic())
                    else:
                        errors[str(outcome)] += 1
                        examples.setdefault(str(outcome), (json.dumps(req[3][1])[:300],
                                                           info.get("body", b"").decode("utf-8", "replace")))

        t0 = time.monotonic()
        threads = [threading.Thread(target=loop, args=(i,), daemon=True) for i in range(c)]
        for t in threads:
            t.start()
        while len(done) < c and time.monotonic() - t0 < max(6 * seconds, timeout) and server.alive():
            time.sleep(0.1)
        w0, n0 = time.monotonic(), len(done)
        while server.alive():
            el, n = time.monotonic() - w0, len(done) - n0
            if (el >= seconds and n >= c) or el >= 6 * seconds:
                break
            time.sleep(0.1)
        with lock:
            stop.set()
            el, n = time.monotonic() - w0, len(done) - n0
            for conn in list(conns):
                try:
                    conn.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        for t in threads:
            t.join(30)
        rate = n / el if el > 0 else 0.0
        results[c] = {"completed_per_s": round(rate, 3), "completed_in_window": n, "window_s": round(el, 1),
                      "warmup_s": round(w0 - t0, 1), "errors": dict(errors), "error_examples": examples}
        print(f"  calibration: concurrency {c:4d}: {rate:8.2f} completed requests/s ({n} in {el:.1f} s after "
              f"{w0 - t0:.1f} s warm-up)" + (f" (errors: {dict(errors)}; e.g. {examples})" if errors else ""),
              flush=True)
        wait_idle(server, timeout)
        if not server.alive():
            break
    return results


def wait_idle(server, timeout):
    """Waits until nothing runs or waits; returns (metrics, seconds) or (last metrics, None) on timeout."""
    t0 = time.monotonic()
    last = None
    while time.monotonic() - t0 < timeout and server.alive():
        try:
            last = metrics(server.addr)
            if last["vllm:num_requests_running"] == 0 and last["vllm:num_requests_waiting"] == 0:
                return last, time.monotonic() - t0
        except OSError:
            pass
        time.sleep(0.5)
    return last, None


def mb(kb):
    return None if kb is None else round(kb / 1024, 1)


def main():
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] + "\n\n" + __doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gemmakit", required=True, help="the gemmakit binary (copy it if others rebuild it)")
    ap.add_argument("--model", required=True, help="model directory (e.g. from `gemmakit init --preset tiny`)")
    ap.add_argument("--duration", type=float, default=1800, help="seconds of overload (default 1800)")
    ap.add_argument("--multiplier", type=float, default=10,
                    help="well-formed requests arrive at this many times the calibrated sustainable rate (default 10)")
    ap.add_argument("--seed", type=int, default=1, help="seed of the request mix and arrival times (default 1)")
    ap.add_argument("--port", type=int, default=0, help="server port (default 0: any free port)")
    ap.add_argument("--server-args", default=DEFAULT_SERVER_ARGS,
                    help=f"extra `gemmakit serve` arguments, one string (default: \"{DEFAULT_SERVER_ARGS}\"); "
                         "write --server-args=\"...\"")
    ap.add_argument("--server-cpus", default=None,
                    help="CPUs the server is pinned to, e.g. 1 or 2-3 (default: the last CPU; 'all': no pinning)")
    ap.add_argument("--client-cpus", default=None, help="CPUs the client is pinned to (default: the others)")
    ap.add_argument("--mix", default="70,15,15",
                    help="weights of well-formed, hang-up and malformed requests (default 70,15,15)")
    ap.add_argument("--rate", type=float, default=None,
                    help="skip calibration: the sustainable rate of well-formed requests, in requests/s")
    ap.add_argument("--calib-concurrency", default="8,32,128",
                    help="closed-loop concurrencies tried; the best completed requests/s is the sustainable rate")
    ap.add_argument("--calib-seconds", type=float, default=15, help="measured seconds per concurrency (default 15)")
    ap.add_argument("--max-inflight", type=int, default=512,
                    help="the client's open requests at most; arrivals beyond are dropped and counted (default 512)")
    ap.add_argument("--max-prompt-words", type=int, default=100, help="well-formed prompts have 4..N words")
    ap.add_argument("--max-tokens", type=int, default=128, help="well-formed requests ask for 1..N tokens")
    ap.add_argument("--request-timeout", type=float, default=300, help="client socket timeout, seconds")
    ap.add_argument("--sample-every", type=float, default=10, help="seconds between RSS and /metrics samples")
    ap.add_argument("--drain-timeout", type=float, default=600, help="seconds to wait for the drain at the end")
    ap.add_argument("--json-out", default=None, help="write the report (and the samples) as JSON here")
    ap.add_argument("--server-log", default=None, help="the server's stderr goes here (default: next to --json-out,"
                                                       " else /tmp/soak-serve-PID.log)")
    args = ap.parse_args()

    ncpu = os.cpu_count() or 1

    def cpu_list(text):
        out = set()
        for part in text.split(","):
            a, _, b = part.partition("-")
            out.update(range(int(a), int(b or a) + 1))
        return out

    if args.server_cpus == "all" or ncpu == 1:
        server_cpus, client_cpus = None, None
    else:
        server_cpus = cpu_list(args.server_cpus) if args.server_cpus else {ncpu - 1}
        client_cpus = cpu_list(args.client_cpus) if args.client_cpus else (set(range(ncpu)) - server_cpus or None)
    if client_cpus:
        os.sched_setaffinity(0, client_cpus)
    weights = [float(x) for x in args.mix.split(",")]
    if len(weights) != 3 or weights[0] <= 0 or min(weights) < 0:
        ap.error("--mix needs three weights, the first above 0")
    log_path = args.server_log or (os.path.splitext(args.json_out)[0] + ".server.log" if args.json_out
                                   else f"/tmp/soak-serve-{os.getpid()}.log")
    cmd = [args.gemmakit, "serve", "--model", args.model, "--port", str(args.port), "--served-model-name", "soak",
           *shlex.split(args.server_args)]
    started = datetime.datetime.now().astimezone()
    print(f"soak_serve: {started.isoformat(timespec='seconds')} on {platform.node()} ({ncpu} CPUs)", flush=True)
    print(f"soak_serve: server: {shlex.join(cmd)}", flush=True)
    print(f"soak_serve: server pinned to CPUs {sorted(server_cpus) if server_cpus else 'all'} (sched_setaffinity, "
          f"as taskset -c), client to {sorted(client_cpus) if client_cpus else 'all'}; server log {log_path}",
          flush=True)

    server = Server(cmd, server_cpus, log_path)

    def cleanup():  # never leave the server behind (an exception, Ctrl-C, SIGTERM)
        if server.proc is not None and server.proc.poll() is None:
            server.proc.kill()

    atexit.register(cleanup)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))
    server.start(timeout=300)
    st0 = proc_status(server.pid)
    status, body = get(server.addr, "/v1/models")
    card = json.loads(body)["data"][0]
    model_name, max_model_len = card["id"], int(card.get("max_model_len") or 512)
    m0 = metrics(server.addr)
    kv_total = {g: int(m0[f"gemmakit:kv_blocks_total[{g}]"]) for g in ("full", "sliding")}
    print(f"soak_serve: server pid {server.pid} at http://{server.addr[0]}:{server.addr[1]}, model \"{model_name}\", "
          f"max_model_len {max_model_len}, KV blocks {kv_total}, RSS {mb(st0['VmRSS'])} MiB", flush=True)
    mix = Mix(model_name, max_model_len, args.max_prompt_words, args.max_tokens)

    report = {"date": started.isoformat(timespec="seconds"),
              "machine": {"host": platform.node(), "nproc": ncpu, "kernel": platform.release(),
                          "python": platform.python_version()},
              "server": {"cmd": cmd, "pid": server.pid, "cpus": sorted(server_cpus) if server_cpus else "all",
                         "client_cpus": sorted(client_cpus) if client_cpus else "all", "model": args.model,
                         "max_model_len": max_model_len, "kv_blocks_total": kv_total, "log": log_path},
              "settings": {k: v for k, v in vars(args).items() if k not in ("gemmakit", "model")}}
    failures = []

    # 1. calibration
    if args.rate:
        calib, rate = {"given": args.rate}, args.rate
        print(f"soak_serve: sustainable rate given: {rate:.2f} requests/s", flush=True)
    else:
        print(f"soak_serve: calibrating (closed loop, well-formed requests, {args.calib_seconds:g} s each)", flush=True)
        conc = [int(x) for x in args.calib_concurrency.split(",")]
        calib = calibrate(server, mix, args.seed, conc, args.calib_seconds, args.request_timeout)
        rate = max(v["completed_per_s"] for v in calib.values())
        if rate <= 0:
            failures.append("calibration completed no request")
            rate = 1.0
        wait_idle(server, args.drain_timeout)
    frac_normal = weights[0] / sum(weights)
    target_normal = args.multiplier * rate
    target_total = target_normal / frac_normal
    report["calibration"] = {"closed_loop": calib, "sustainable_rate_rps": rate}
    report["target"] = {"multiplier": args.multiplier, "normal_rps": round(target_normal, 3),
                        "total_rps": round(target_total, 3), "mix_weights": weights}
    print(f"soak_serve: sustainable {rate:.2f} req/s; sending well-formed requests at {target_normal:.2f} req/s "
          f"({args.multiplier:g}x), all kinds at {target_total:.2f} req/s, for {args.duration:g} s", flush=True)

    # 2. the soak
    stats = Stats()
    pool = Pool(server.addr, args.max_inflight, args.request_timeout, stats)
    st1 = proc_status(server.pid) or {}
    samples = []
    stop = threading.Event()
    soak_t0 = time.monotonic()

    def sample(phase):
        st = proc_status(server.pid)
        row = {"t": round(time.monotonic() - soak_t0, 1), "phase": phase, "alive": server.alive()}
        if st:
            row.update(rss_mb=mb(st["VmRSS"]), hwm_mb=mb(st["VmHWM"]), threads=st["Threads"], fds=st["fds"])
        try:
            m = metrics(server.addr)
            row.update(running=int(m["vllm:num_requests_running"]), waiting=int(m["vllm:num_requests_waiting"]),
                       kv_full=int(m["gemmakit:kv_blocks_used[full]"]),
                       kv_sliding=int(m["gemmakit:kv_blocks_used[sliding]"]),
                       kv_usage=round(m["vllm:kv_cache_usage_perc"], 4),
                       preemptions=int(m["vllm:num_preemptions_total"]),
                       success=int(m["vllm:request_success_total"]),
                       stopped=int(m["vllm:request_success_total[stop]"]),
                       length=int(m["vllm:request_success_total[length]"]),
                       aborted=int(m["vllm:request_success_total[abort]"]))
        except (OSError, ValueError, http.client.HTTPException) as e:
            row["metrics_error"] = type(e).__name__
        row.update(stats.totals())
        samples.append(row)
        return row

    phase = ["soak"]
    stop_sampling = threading.Event()

    def sampler():
        while not stop_sampling.wait(args.sample_every):
            row = sample(phase[0])
            print("  {phase} t={t:7.1f}s rss={rss}MiB thr={thr} fds={fds} run={run} wait={wait} kv={kvf}/{kvs} "
                  "sent={sent} served={served} drops={drops} inflight={inflight}{err}".format(
                      phase=row["phase"], t=row["t"], rss=row.get("rss_mb"), thr=row.get("threads"), fds=row.get("fds"),
                      run=row.get("running"), wait=row.get("waiting"), kvf=row.get("kv_full"),
                      kvs=row.get("kv_sliding"), sent=row["sent"], served=row["served"], drops=row["drops"],
                      inflight=row["inflight"],
                      err=f" metrics_error={row['metrics_error']}" if "metrics_error" in row else ""), flush=True)
            if not row["alive"]:
                print("soak_serve: THE SERVER DIED", flush=True)
                stop.set()
                return

    sample("start")
    sampler_thread = threading.Thread(target=sampler, daemon=True)
    sampler_thread.start()
    rng = random.Random(args.seed)
    next_t = soak_t0
    arrivals = 0
    while not stop.is_set():
        next_t += rng.expovariate(target_total)
        now = time.monotonic()
        if next_t - soak_t0 >= args.duration:
            break
        if next_t > now:
            time.sleep(next_t - now)
        req = mix.pick(rng, weights)
        arrivals += 1
        if not pool.submit(req):
            with stats.lock:
                stats.drops[req[0]] += 1
        if arrivals % 200 == 0 and not server.alive():
            print("soak_serve: THE SERVER DIED", flush=True)
            break
    t_stop = time.monotonic()
    soak_s = t_stop - soak_t0
    stop.set()
    phase[0] = "drain"
    print(f"soak_serve: arrivals stopped after {soak_s:.1f} s ({arrivals} arrivals, {arrivals / soak_s:.2f}/s); "
          "waiting for the client's requests and the server's drain", flush=True)

    # 3. drain, then idle figures
    clients_done = pool.join(args.drain_timeout)
    if not clients_done:
        failures.append(f"client requests still open {args.drain_timeout:g} s after the soak")
    idle_metrics, idle_wait = wait_idle(server, args.drain_timeout)
    drain_s = None if idle_wait is None else time.monotonic() - t_stop
    stop_sampling.set()
    sampler_thread.join()
    if server.alive() and drain_s is None:
        failures.append(f"server not idle {args.drain_timeout:g} s after the soak")
    time.sleep(2)  # let a freed block's bookkeeping settle before the idle reading
    kv_idle = None
    if server.alive():
        try:
            idle_metrics = metrics(server.addr)
        except OSError:
            pass
    if idle_metrics is not None:
        kv_idle = {g: int(idle_metrics[f"gemmakit:kv_blocks_used[{g}]"]) for g in ("full", "sliding")}
    end_row = sample("idle") if server.alive() else {}
    st2 = proc_status(server.pid) or {}
    post_ok = None
    if server.alive():  # one more well-formed request: the server still serves
        for stream in (False, True):
            _, b = mix.normal_body(random.Random(args.seed), stream=stream, chat=True)
            req = ("normal", "post_soak", "full", (http_request("POST", "/v1/chat/completions",
                                                                json.dumps(b).encode()), b))
            outcome, _ = run_one(server.addr, req, 120)
            post_ok = (post_ok is not False) and outcome == 200
        if not post_ok:
            failures.append("a well-formed request after the soak was not answered 200")
        time.sleep(1)
        try:
            m = metrics(server.addr)
            kv_after = int(m["gemmakit:kv_blocks_used"])
            if kv_after != 0:
                failures.append(f"{kv_after} KV blocks in use after the post-soak requests")
        except OSError:
            pass
    alive_at_end = server.alive()
    restarted = proc_start_time(server.pid) not in (None, server.start_time)
    crashes = len(server.deaths)
    exit_code, stop_s = server.stop(timeout=120)
    if crashes:
        failures.append(f"server died during the run (exit status {server.deaths[0][1]})")
    elif exit_code != 0:
        failures.append(f"server exit status {exit_code} after SIGTERM (None: killed after 120 s)")
    if restarted:
        failures.append("the server process was replaced (start time changed)")
    kv_idle_total = None if kv_idle is None else sum(kv_idle.values())
    if kv_idle_total != 0:
        failures.append(f"KV blocks in use when idle: {kv_idle}")

    # 4. the report
    by_kind = {}
    errors_by_status = collections.Counter()
    errors_by_status_cat = collections.defaultdict(collections.Counter)
    conn_errors = collections.Counter()
    unexpected = collections.defaultdict(collections.Counter)
    served = collections.Counter()
    hangups = 0
    for kind in sorted(stats.outcomes):
        oc = stats.outcomes[kind]
        cat = stats.cat_of[kind]
        by_kind[kind] = {"category": cat, "sent": stats.sent[kind],
                         "outcomes": {str(k): v for k, v in sorted(oc.items(), key=lambda kv: str(kv[0]))}}
        for o, c in oc.items():
            if isinstance(o, int) and o < 300:
                served[cat] += c
            elif isinstance(o, int):
                errors_by_status[o] += c
                errors_by_status_cat[cat][o] += c
            elif o == "hung_up":
                hangups += c
            else:
                conn_errors[o] += c
            if not expected(cat, kind, o):
                unexpected[kind][str(o)] += c
    lat = {}
    for kind, xs in stats.latency.items():
        xs = sorted(xs)
        lat[kind] = {"n": len(xs), "p50_s": round(xs[len(xs) // 2], 3), "p99_s": round(xs[int(len(xs) * 0.99)], 3)}
    rss_vals = [r["rss_mb"] for r in samples if r.get("rss_mb") is not None]
    report.update({
        "duration_s": args.duration, "soak_s": round(soak_s, 1), "arrivals": arrivals,
        "arrival_rps": round(arrivals / soak_s, 3) if soak_s else None,
        "requests_sent_by_category": dict(stats.sent_cat),
        "requests_sent_by_kind": dict(sorted(stats.sent.items())),
        "served_2xx": sum(served.values()), "served_2xx_by_category": dict(served),
        # served while the load ran and the queue drained (the client's requests finish in the drain)
        "served_rps": round(sum(served.values()) / (soak_s + (drain_s or 0)), 3) if soak_s else None,
        "errors_by_status": {str(k): v for k, v in sorted(errors_by_status.items())},
        "errors_by_status_by_category": {c: {str(k): v for k, v in sorted(x.items())}
                                         for c, x in errors_by_status_cat.items()},
        "connection_errors": dict(conn_errors), "hangups": hangups,
        "client_drops": sum(stats.drops.values()), "client_drops_by_category": dict(stats.drops),
        "unexpected_outcomes": {k: dict(v) for k, v in unexpected.items()},
        "unexpected_examples": dict(stats.examples),
        "latency_served_normal": lat,
        "crashes": crashes, "deaths": server.deaths, "restarted": restarted, "alive_at_end": alive_at_end,
        "rss_mb": {"after_start": mb(st0.get("VmRSS")), "soak_start": mb(st1.get("VmRSS")),
                   "peak_sampled": max(rss_vals) if rss_vals else None, "vm_hwm": mb(st2.get("VmHWM")),
                   "end_idle": mb(st2.get("VmRSS"))},
        "threads": {"after_start": st0.get("Threads"), "soak_start": st1.get("Threads"),
                    "peak_sampled": max((r.get("threads") or 0) for r in samples), "end_idle": st2.get("Threads")},
        "fds": {"after_start": st0.get("fds"), "soak_start": st1.get("fds"),
                "peak_sampled": max((r.get("fds") or 0) for r in samples), "end_idle": st2.get("fds")},
        "kv_blocks_in_use_idle": kv_idle, "kv_blocks_in_use_idle_total": kv_idle_total,
        "idle_metrics": {k: end_row.get(k) for k in ("running", "waiting", "preemptions", "success", "stopped",
                                                     "length", "aborted")},
        "drain_s": None if drain_s is None else round(drain_s, 1),
        "post_soak_requests_ok": post_ok,
        "server_exit_code": exit_code, "server_stop_s": round(stop_s, 1),
        "server_log_tail": server.log_tail(10),
        "failures": failures, "passed": not failures,
        "samples": samples,
    })

    w = 34
    line = lambda k, v: print(f"{k:<{w}} {v}")  # noqa: E731
    print("\n============ gemmakit serve soak under overload ============")
    line("date", report["date"])
    line("machine", f"{ncpu} CPUs, {platform.release()}; server on CPUs {report['server']['cpus']}, "
                    f"client on {report['server']['client_cpus']}")
    line("server", shlex.join(cmd))
    line("duration (s)", f"{args.duration:g} asked, {soak_s:.1f} run")
    line("sustainable rate (req/s)", f"{rate:.2f} (given with --rate)" if args.rate else f"{rate:.2f} (closed loop: "
         + ", ".join(f"c={c}: {v['completed_per_s']}" for c, v in calib.items()) + ")")
    line("target rate (req/s)", f"{target_normal:.2f} well-formed ({args.multiplier:g}x), {target_total:.2f} all")
    line("arrivals", f"{arrivals} ({report['arrival_rps']}/s)")
    line("sent by category", json.dumps(report["requests_sent_by_category"]))
    for kind, v in by_kind.items():
        line(f"  {kind}", f"sent {v['sent']}: {json.dumps(v['outcomes'])}")
    line("served (2xx)", f"{report['served_2xx']} ({report['served_rps']}/s over soak + drain) "
                         f"{json.dumps(dict(served))}")
    line("errors by status", json.dumps(report["errors_by_status"]))
    for c, x in report["errors_by_status_by_category"].items():
        line(f"  {c}", json.dumps(x))
    line("connection errors", json.dumps(report["connection_errors"]))
    line("client hang-ups (intended)", hangups)
    line("client drops (in-flight cap)", f"{report['client_drops']} {json.dumps(report['client_drops_by_category'])}")
    line("unexpected outcomes", json.dumps(report["unexpected_outcomes"]) if unexpected else "none")
    line("served latency p50/p99 (s)", ", ".join(f"{k} {v['p50_s']}/{v['p99_s']}" for k, v in sorted(lat.items())))
    line("crashes", crashes)
    line("RSS MiB start/soak-start/peak/end", "{after_start} / {soak_start} / {peak_sampled} (VmHWM {vm_hwm}) / "
                                              "{end_idle}".format(**report["rss_mb"]))
    line("threads start/peak/end", "{after_start} / {peak_sampled} / {end_idle}".format(**report["threads"]))
    line("open fds start/peak/end", "{after_start} / {peak_sampled} / {end_idle}".format(**report["fds"]))
    line("KV blocks in use when idle", f"{kv_idle_total} {json.dumps(kv_idle)} (of {json.dumps(kv_total)})")
    line("server counters when idle", json.dumps(report["idle_metrics"]))
    line("drain after the soak (s)", report["drain_s"])
    line("post-soak requests answered", post_ok)
    line("server exit code (SIGTERM)", f"{exit_code} (stopped in {stop_s:.1f} s)")
    line("result", "PASS" if not failures else "FAIL: " + "; ".join(failures))
    if crashes:
        print("server log tail:\n" + report["server_log_tail"])
    if args.json_out:
        tmp = args.json_out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(report, f, indent=1)
        os.replace(tmp, args.json_out)
        print(f"report written to {args.json_out}")
    sys.exit(0 if not failures else 1)


if __name__ == "__main__":
    main()
