"""Starts the real `gemmakit serve` for end-to-end tests (Python stdlib only).

    with ServeProcess(gemmakit, model_dir, extra_args) as server:
        server.base_url  # http://127.0.0.1:PORT
    # leaving the block sends SIGTERM and checks a clean exit (status 0)

make_tiny_model() writes the tiny Gemma 4 preset with `gemmakit init` (random weights, the real
Gemma 3/4 tokenizer fetched by scripts/fetch_tokenizer.sh into <source>/build/tokenizer/gemma3).
"""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.abspath(os.path.join(HERE, "..", ".."))
TOKENIZER_DIR = os.path.join(SOURCE_DIR, "build", "tokenizer", "gemma3")

LISTEN_RE = re.compile(r"listening on (http://[^\s]+)")


def fail(message):
    print(f"FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def check(condition, message):
    if not condition:
        fail(message)


def make_tiny_model(gemmakit, out_dir):
    if os.path.exists(os.path.join(out_dir, "config.json")):
        return out_dir
    env = dict(os.environ)
    env.setdefault("GEMMAKIT_TOKENIZER_DIR", TOKENIZER_DIR)
    if not os.path.exists(os.path.join(env["GEMMAKIT_TOKENIZER_DIR"], "tokenizer.json")):
        fail(f"no tokenizer.json in {env['GEMMAKIT_TOKENIZER_DIR']}; run scripts/fetch_tokenizer.sh")
    subprocess.run([gemmakit, "init", "--preset", "tiny", "--out", out_dir, "--seed", "1"], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    return out_dir


class ServeProcess:
    """The server as a child process; its stderr is collected in `self.log`. GEMMAKIT_SERVE_EXTRA_ARGS
    (say "--device cuda", as scripts/device_check.sh runs the serving tests on a GPU) is appended.
    model_dir None: the model comes from args (`--preset NAME` on a GPU)."""

    def __init__(self, gemmakit, model_dir, args=(), start_timeout=120):
        extra = os.environ.get("GEMMAKIT_SERVE_EXTRA_ARGS", "").split()
        model = ["--model", model_dir] if model_dir is not None else []
        self.cmd = [gemmakit, "serve", *model, "--port", "0", "--threads", "2", *args, *extra]
        self.start_timeout = start_timeout
        self.log = []
        self.base_url = None
        self.proc = None
        self.exit_code = None

    def __enter__(self):
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     errors="replace")
        ready = threading.Event()

        def pump():
            for line in self.proc.stdout:
                self.log.append(line)
                m = LISTEN_RE.search(line)
                if m and not ready.is_set():
                    self.base_url = m.group(1)
                    ready.set()
            ready.set()

        self.reader = threading.Thread(target=pump, daemon=True)
        self.reader.start()
        if not ready.wait(self.start_timeout) or self.base_url is None:
            self.proc.kill()
            fail(f"server did not start: {' '.join(self.cmd)}\n{''.join(self.log)}")
        return self

    def log_text(self):
        return "".join(self.log)

    def terminate(self, timeout=60):
        """SIGTERM, then wait: returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.exit_code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            fail(f"server did not exit within {timeout} s of SIGTERM\n{self.log_text()}")
        self.reader.join(5)
        return self.exit_code

    def __exit__(self, exc_type, exc, tb):
        code = self.terminate()
        if exc_type is None:
            check(code == 0, f"server exited with {code} after SIGTERM\n{self.log_text()}")
        return False


# ---- HTTP helpers -------------------------------------------------------------------------

def request(base_url, method, path, body=None, headers=None, timeout=120, raw_body=None):
    """Returns (status, headers dict, body bytes); HTTP errors are returned, not raised."""
    data = raw_body if raw_body is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(base_url + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def post_json(base_url, path, body, headers=None, timeout=120):
    status, _, data = request(base_url, "POST", path, body, headers, timeout)
    try:
        parsed = json.loads(data) if data else None
    except json.JSONDecodeError:
        fail(f"POST {path} {body}: status {status}, body is not JSON: {data[:300]!r}")
    return status, parsed


def sse_events(base_url, path, body, headers=None, timeout=120):
    """POSTs a streaming request; returns the list of data payloads (str), [DONE] included."""
    status, hdrs, data = request(base_url, "POST", path, body, headers, timeout)
    check(status == 200, f"stream {path}: status {status}: {data[:300]!r}")
    check("text/event-stream" in hdrs.get("Content-Type", ""), f"stream content type {hdrs}")
    text = data.decode("utf-8")
    check(text.endswith("\n\n"), f"stream does not end with a blank line: {text[-100:]!r}")
    events = []
    for block in text.split("\n\n")[:-1]:
        check(block.startswith("data: "), f"not an SSE data event: {block[:200]!r}")
        events.append(block[len("data: "):])
    return events


def metrics(base_url):
    """Parses /metrics into {(name, frozenset(labels)): value} and a name -> total helper."""
    status, _, data = request(base_url, "GET", "/metrics")
    check(status == 200, f"/metrics status {status}")
    samples = {}
    for line in data.decode().splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})? (\S+)$', line)
        check(m is not None, f"bad exposition line: {line!r}")
        labels = frozenset(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        samples[(m.group(1), labels)] = float(m.group(4))
    return samples


def metric_total(samples, name):
    return sum(v for (n, _), v in samples.items() if n == name)


def wait_idle(base_url, timeout=30):
    """Waits until no request runs or waits and no KV block is referenced; returns the metrics."""
    end = time.time() + timeout
    while True:
        m = metrics(base_url)
        busy = (metric_total(m, "gemmakit:kv_blocks_used"), metric_total(m, "vllm:num_requests_running"),
                metric_total(m, "vllm:num_requests_waiting"))
        if busy == (0, 0, 0):
            return m
        if time.time() > end:
            fail(f"server not idle after {timeout} s: kv_blocks_used, running, waiting = {busy}")
        time.sleep(0.1)
