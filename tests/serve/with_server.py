#!/usr/bin/env python3
"""Runs a command against a live `gemmakit serve` (tiny model), then SIGTERMs the server and
checks that it exits with status 0.

    with_server.py --gemmakit build/gemmakit [--server-arg=--api-key=KEY ...] -- CMD ARGS...

The command gets GK_BASE_URL (http://127.0.0.1:PORT), GK_MODEL (the served model name) and,
with --api-key among the server args, GK_API_KEY. Exit status: the command's, or 1 when the
server misbehaved.
"""

import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_harness import ServeProcess, make_tiny_model  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemmakit", required=True)
    ap.add_argument("--server-arg", action="append", default=[])
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        ap.error("give the command after --")
    server_args = ["--max-model-len", "512", "--kv-cache-memory", "64MiB", "--served-model-name", "tiny"]
    server_args += args.server_arg
    with tempfile.TemporaryDirectory(prefix="gk-serve-") as tmp:
        model = make_tiny_model(args.gemmakit, os.path.join(tmp, "tiny"))
        with ServeProcess(args.gemmakit, model, server_args) as server:
            env = dict(os.environ, GK_BASE_URL=server.base_url, GK_MODEL="tiny")
            for a in server_args:
                if a.startswith("--api-key="):
                    env["GK_API_KEY"] = a.split("=", 1)[1]
            code = subprocess.call(cmd, env=env)
            if code != 0:
                print(f"command failed ({code}); server log:\n{server.log_text()}", file=sys.stderr)
    sys.exit(code)


if __name__ == "__main__":
    main()
