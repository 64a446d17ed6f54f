#!/usr/bin/python3
"""The chat template `gemmakit init` writes into tokenizer_config.json (kChatTemplate,
src/formats/gemma4_tokens.cc) against the official Gemma 4 31B template.

1. Our template, rendered by gemmakit's engine, against Python's jinja2 (oracle_test.py's
   transformers setup and checks: identical text, an error wherever jinja2 raises, data never in
   a template span), over conversations.json and init_conversations.json.
2. Our template and ../shared/fixtures/chat-templates/gemma-4-31B-it.jinja, both rendered by
   jinja2, over every conversation that uses only what gemmakit serves (text content; conversations
   with image, audio or video parts outside tool results are left out): identical text, or both
   raise. Skipped (status 77 once part 1 passed) without ../shared.

The template is taken from what `gemmakit init --preset tiny --no-weights` writes; without the
fetched Gemma 3 tokenizer (scripts/fetch_tokenizer.sh), from a stand-in tokenizer holding only the
control-token slots.

    /usr/bin/python3 tests/chat_template/init_template_test.py --gemmakit build/gemmakit
"""

import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle_test  # noqa: E402 -- exits 77 without jinja2

HERE = oracle_test.HERE
OFFICIAL = os.path.join(oracle_test.SHARED_TEMPLATES, "gemma-4-31B-it.jinja")
MEDIA_PARTS = ("image", "audio", "video")


def stand_in_tokenizer(directory):
    """A tokenizer.json whose vocab has only the control-token slots init relabels (their Gemma 3
    names, read from kTokens in gemma4_tokens.cc), and a minimal tokenizer_config.json."""
    with open(os.path.join(oracle_test.SOURCE_DIR, "src", "formats", "gemma4_tokens.cc"), encoding="utf-8") as f:
        source = f.read()
    quoted = r'"((?:[^"\\]|\\.)*)"'
    slots = re.findall(r"\{(\d+), " + quoted + ", " + quoted + r"\}", source)
    if not slots:
        raise RuntimeError("no kTokens entries found in src/formats/gemma4_tokens.cc")
    vocab = {json.loads(f'"{gemma3}"'): int(slot) for slot, _, gemma3 in slots}
    with open(os.path.join(directory, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump({"added_tokens": [], "model": {"type": "BPE", "vocab": vocab}}, f)
    with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"bos_token": "<bos>", "chat_template": "replaced by init"}, f)


def init_template(gemmakit):
    """kChatTemplate, as `gemmakit init` writes it."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "model")
        command = [gemmakit, "init", "--preset", "tiny", "--no-weights", "--out", out]
        subprocess.run(command, check=True, capture_output=True, timeout=120)
        config = os.path.join(out, "tokenizer_config.json")
        if not os.path.exists(config):
            print("NOTE: no fetched Gemma 3 tokenizer; `gemmakit init` runs with a stand-in tokenizer")
            stand_in = os.path.join(tmp, "tokenizer")
            os.mkdir(stand_in)
            stand_in_tokenizer(stand_in)
            subprocess.run(command + ["--tokenizer-dir", stand_in], check=True, capture_output=True, timeout=120)
        with open(config, encoding="utf-8") as f:
            return json.load(f)["chat_template"]


def all_cases():
    cases = oracle_test.conversation_cases()
    with open(os.path.join(HERE, "init_conversations.json"), encoding="utf-8") as f:
        cases += [(c["name"], {**oracle_test.SPECIAL_TOKENS, **c["context"]}) for c in json.load(f)]
    return cases


def unserved_parts(context):
    """The media part types in non-tool messages (the official template renders them as
    <|image|>/<|audio|>/<|video|>; gemmakit serves text only)."""
    found = set()
    for message in context.get("messages", []):
        content = message.get("content")
        if message.get("role") != "tool" and isinstance(content, list):
            found.update(p.get("type") for p in content if isinstance(p, dict) and p.get("type") in MEDIA_PARTS)
    return sorted(found)


def compare_with_official(ours, official, cases):
    """jinja2 renders of both templates. Returns (identical, refused by both, failures)."""
    contexts = [context for _, context in cases]
    same = both_refused = 0
    failures = []
    for (label, _), (ok, text), (official_ok, official_text) in zip(
            cases, oracle_test.jinja2_results(ours, contexts), oracle_test.jinja2_results(official, contexts)):
        if ok and official_ok and text == official_text:
            same += 1
        elif not ok and not official_ok:
            both_refused += 1
        elif ok and official_ok:
            failures.append(f"{label}: text differs\n  ours:     {text!r}\n  official: {official_text!r}")
        else:
            failures.append(f"{label}: ours {'rendered' if ok else 'raised (' + text + ')'}, "
                            f"the official template {'rendered' if official_ok else 'raised (' + official_text + ')'}")
    return same, both_refused, failures


def main():
    args, jinja_render = oracle_test.driver_arguments(__doc__.split("\n")[0])
    if jinja_render is None:
        return 1
    ours = init_template(args.gemmakit)
    cases = all_cases()

    same, both_refused, failures = oracle_test.compare("init template (engine vs jinja2)", ours, cases, jinja_render)
    print(f"init template, engine vs jinja2: {same} rendered identically, {both_refused} refused by both, "
          f"{len(failures)} failed (of {len(cases)})")

    skipped = False
    if not os.path.exists(OFFICIAL):
        print(f"SKIP init template vs gemma-4-31B-it.jinja: {OFFICIAL} is absent (../shared/fixtures)")
        skipped = True
    else:
        with open(OFFICIAL, encoding="utf-8") as f:
            official = f.read()
        served = []
        for label, context in cases:
            parts = unserved_parts(context)
            if parts:
                print(f"left out {label}: {'/'.join(parts)} parts")
            else:
                served.append((label, context))
        same, both_refused, official_failures = compare_with_official(ours, official, served)
        print(f"init template vs gemma-4-31B-it.jinja (jinja2): {same} identical, {both_refused} refused by both, "
              f"{len(official_failures)} differ (of {len(served)})")
        if same < len(served) // 2:
            official_failures.append(f"only {same} of {len(served)} conversations render; the corpus lost its coverage")
        failures.extend(f"vs official / {f}" for f in official_failures)

    for failure in failures:
        print(f"FAIL {failure}")
    if failures:
        print(f"FAILED: {len(failures)} failures")
        return 1
    print("PASSED" + (" (the comparison with the official template was skipped)" if skipped else ""))
    return 77 if skipped else 0


if __name__ == "__main__":
    sys.exit(main())
