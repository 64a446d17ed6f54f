#!/usr/bin/python3
"""`mpirun -np 2 gemmakit serve --tp 2` end to end: rank 0 serves HTTP and schedules, both ranks
run every forward pass on their halves of the model and of the KV cache.

    serve_tp_e2e_test.py --gemmakit build/gemmakit

  (a) The checks of tests/serve/serve_e2e_test.py against the tensor-parallel server (tiny
      preset, bf16): every endpoint, streaming == non-streaming, stop strings, n and seed,
      logprobs, bad input answered while serving goes on, clients hanging up (blocks freed),
      80 concurrent streams, greedy requests alone == among 16 concurrent others (prefix
      caching and chunked prefill on).
  (b) An f32 tiny model: greedy completions of several prompts, one at a time and 8 at once,
      equal to a one-process server's text.
  (c) SIGTERM to rank 0 (the process that listens) while a request streams: the stream
      completes, rank 0 releases the other rank, and mpirun exits 0. (Every server of this test
      is stopped that way. SIGTERM to mpirun itself reaches the ranks only after Open MPI's
      odls_base_sigkill_timeout, and SIGKILL follows as long again: README "Tensor parallel".)
Skipped (exit 77) without mpirun. One thread per rank.
"""
import os
import signal
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "serve"))
import serve_e2e_test as e2e  # noqa: E402
sys.path.insert(0, HERE)
from dist_common import gemmakit_or_skip, mpirun  # noqa: E402
from serve_harness import ServeProcess, check, make_tiny_model, post_json, wait_idle  # noqa: E402



def rank0_pid(mpirun_pid):
    """The pid of mpirun's child with OMPI_COMM_WORLD_RANK=0."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != mpirun_pid:
                continue
            with open(f"/proc/{entry}/environ", "rb") as f:
                if b"OMPI_COMM_WORLD_RANK=0\0" in f.read():
                    return int(entry)
        except (OSError, ValueError, IndexError):
            continue
    return None


class TpServeProcess(ServeProcess):
    """The server under `mpirun -np tp ... --tp tp`, stopped by SIGTERM to rank 0."""

    def __init__(self, gk, model_dir, args, tp=2):
        super().__init__(gk, model_dir, args)
        cmd = [a if a != "2" or self.cmd[i - 1] != "--threads" else "1" for i, a in enumerate(self.cmd)]
        self.cmd = mpirun(tp) + cmd + ["--tp", str(tp)]

    def terminate(self, timeout=60):
        if self.proc.poll() is None:
            pid = rank0_pid(self.proc.pid)
            check(pid is not None, "rank 0 of the server not found among mpirun's children")
            os.kill(pid, signal.SIGTERM)
        try:
            self.exit_code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            check(False, f"mpirun did not exit within {timeout} s of SIGTERM to rank 0\n{self.log_text()}")
        self.reader.join(5)
        return self.exit_code


def tp_server(gk, model_dir, args, tp=2):
    return TpServeProcess(gk, model_dir, args, tp)


def greedy_texts(url, prompts, concurrent):
    def one(p):
        status, r = post_json(url, "/v1/completions", {"prompt": p, "max_tokens": 12, "temperature": 0})
        check(status == 200, f"completion: {status} {r}")
        return r["choices"][0]["text"]
    if not concurrent:
        return [one(p) for p in prompts]
    with ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        return list(pool.map(one, prompts))


def main():
    gk = gemmakit_or_skip()
    with tempfile.TemporaryDirectory(prefix="gk-serve-tp-") as work:
        # (a)
        model_dir = make_tiny_model(gk, os.path.join(work, "tiny"))
        with tp_server(gk, model_dir, e2e.SERVER_ARGS) as s:
            log_text = s.log_text()
            check("tensor parallel: 2 ranks" in log_text, f"start-up lacks the tensor-parallel line:\n{log_text}")
            check(log_text.count("listening on") == 1, f"one rank listens:\n{log_text}")
            url = s.base_url
            e2e.check_info_endpoints(url, model_dir)
            e2e.check_tokenize(url)
            e2e.check_stream_equals_nonstream(url)
            e2e.check_stop_strings(url)
            e2e.check_n_and_seed(url)
            e2e.check_logprobs(url)
            e2e.check_bad_input(url, model_dir)
            e2e.check_disconnect(url)
            e2e.check_concurrent_streams(url)
            e2e.check_batched_equals_alone(url, "tp 2, prefix caching, chunked prefill")
        e2e.log("ok: tp 2: SIGTERM on an idle server: mpirun exit status 0")

        # (b)
        f32 = os.path.join(work, "tiny-f32")
        subprocess.run([gk, "init", "--preset", "tiny", "--seed", "5", "--dtype", "f32", "--out", f32], check=True,
                       stdout=subprocess.DEVNULL, env=dict(os.environ, GEMMAKIT_TOKENIZER_DIR=os.environ.get(
                           "GEMMAKIT_TOKENIZER_DIR", os.path.join(HERE, "..", "..", "build", "tokenizer", "gemma3"))))
        prompts = ["module top", "assign y = a & b;", "always @(posedge clk)", "x", "Write a counter",
                   "input wire [7:0] d,", "endmodule", "// 4-bit adder"]
        with ServeProcess(gk, f32, e2e.SERVER_ARGS) as s:
            want = greedy_texts(s.base_url, prompts, concurrent=False)
        with tp_server(gk, f32, e2e.SERVER_ARGS) as s:
            alone = greedy_texts(s.base_url, prompts, concurrent=False)
            together = greedy_texts(s.base_url, prompts, concurrent=True)
            wait_idle(s.base_url)
        check(alone == want, f"tp 2 greedy texts {alone} vs one process {want}")
        check(together == want, f"tp 2 greedy texts, 8 at once, {together} vs one process {want}")
        e2e.log(f"ok: f32 tiny: {len(prompts)} greedy completions at tp 2, alone and 8 at once, equal one process's")

        # (c) serve_e2e_test's drain check, the exit status being mpirun's
        e2e.check_sigterm_drain(gk, model_dir, server=tp_server)
    e2e.log("PASS")


if __name__ == "__main__":
    main()
