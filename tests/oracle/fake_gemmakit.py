#!/usr/bin/python3
"""Stand-in for the engine binary, used only by ``check_logits.py --self-test`` to exercise the
driver: implements the ``logprobs`` CLI contract on top of the reference model.

    fake_gemmakit.py logprobs --model DIR --tokens 2,17,5 --json --dump-logits OUT.npy --chunk C

FAKE_GEMMAKIT_MODE: exact (default) | mutate:KNOB | unsupported | bf16noise (relative noise 1e-3).
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from gemma_ref import GemmaRef  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("command")
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--dump-logits")
    ap.add_argument("--chunk", type=int, default=0)
    ap.add_argument("--bf16-activations", default="split")
    a = ap.parse_args()
    if a.command != "logprobs":
        print(f"error: unknown command {a.command}", file=sys.stderr)
        return 2
    mode = os.environ.get("FAKE_GEMMAKIT_MODE", "exact")
    if mode == "unsupported":
        print("error: unsupported model feature: enable_moe_block", file=sys.stderr)
        return 3
    knobs = [mode.split(":", 1)[1]] if mode.startswith("mutate:") else []
    torch.set_num_threads(1)
    m = GemmaRef(a.model, torch.float32, knobs=knobs)
    toks = [int(t) for t in a.tokens.split(",")]
    lg = m.logits_stepwise(toks) if (a.chunk == 1 and not knobs) else m.logits(toks)
    lg = lg.float()
    if mode == "bf16noise":
        g = torch.Generator().manual_seed(0)
        lg = lg + 1e-3 * lg.abs().amax(-1, keepdim=True) * torch.randn(lg.shape, generator=g)
    lp = torch.log_softmax(lg.double(), -1)
    out = {"tokens": toks,
           "logprobs": [float(lp[i, toks[i + 1]]) for i in range(len(toks) - 1)],
           "argmax": [int(i) for i in lg.argmax(-1)]}
    if a.dump_logits:
        np.save(a.dump_logits, lg.numpy().astype(np.float32))
    print("loaded model (fake)", file=sys.stderr)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
