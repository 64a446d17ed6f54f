#!/usr/bin/python3
"""gemmakit's Jinja engine (src/formats/jinja) against Python's jinja2, set up exactly as
transformers' apply_chat_template sets it up: ImmutableSandboxedEnvironment(trim_blocks=True,
lstrip_blocks=True, extensions=[loopcontrols]), globals raise_exception and strftime_now, and
transformers' own tojson filter.

Templates: the Gemma 4 chat templates from ../shared/fixtures/chat-templates (skipped without
../shared), Gemma 3's from build/tokenizer/gemma3/tokenizer_config.json (skipped until
scripts/fetch_tokenizer.sh ran), and the hand-written templates in features/ for what the fixtures
do not exercise. The real templates and features/chatml_tools.jinja render every conversation of
conversations.json; the other feature templates their contexts in features/contexts.json.

For every (template, context): where jinja2 renders, the engine must give the identical string;
where jinja2 raises, the engine must fail too. Every engine render must also keep provenance: its
spans join to the text, and no data string (a context string absent from the template source)
appears inside a template span.

    /usr/bin/python3 tests/chat_template/oracle_test.py --gemmakit build/gemmakit
The engine runs through the test driver build/tests/chat_template/jinja_render (--jinja-render).
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
from datetime import datetime

try:
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print("SKIP: Python's jinja2 is not installed (Debian python3-jinja2, scripts/install_deps.sh)")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.path.abspath(os.path.join(HERE, "..", ".."))
SHARED_TEMPLATES = os.path.join(SOURCE_DIR, "..", "shared", "fixtures", "chat-templates")
# The special tokens transformers passes to every chat template.
SPECIAL_TOKENS = {"bos_token": "<bos>", "eos_token": "<eos>"}


def transformers_environment():
    """transformers.utils.chat_template_utils._compile_jinja_template's environment."""

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def jinja2_results(source, contexts):
    """[(True, text) or (False, error)] per context; a template jinja2 cannot compile fails all."""
    try:
        template = transformers_environment().from_string(source)
    except Exception as e:  # noqa: BLE001 -- any compile error counts as "jinja2 refuses"
        return [(False, f"{type(e).__name__}: {e}")] * len(contexts)
    results = []
    for context in contexts:
        try:
            results.append((True, template.render(**context)))
        except Exception as e:  # noqa: BLE001 -- any render error counts as "jinja2 raises"
            results.append((False, f"{type(e).__name__}: {e}"))
    return results


def engine_results(jinja_render, source, contexts):
    """The engine's result per context: {"ok", "text", "spans"} or {"ok": False, "error"}."""
    with tempfile.TemporaryDirectory() as tmp:
        template_path = os.path.join(tmp, "template.jinja")
        contexts_path = os.path.join(tmp, "contexts.json")
        with open(template_path, "w", encoding="utf-8") as f:
            f.write(source)
        with open(contexts_path, "w", encoding="utf-8") as f:
            json.dump(contexts, f, ensure_ascii=False)
        run = subprocess.run([jinja_render, template_path, contexts_path], capture_output=True, timeout=120)
    if run.returncode != 0:
        raise RuntimeError(f"jinja_render exited with {run.returncode}: {run.stderr.decode(errors='replace')}")
    output = json.loads(run.stdout)
    if isinstance(output, dict):  # the engine refused the template at load time
        return [{"ok": False, "error": output["parse_error"]}] * len(contexts)
    return output


def data_strings(value, out):
    """Every string in a context (dict keys too)."""
    if isinstance(value, str):
        out.add(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            out.add(key)
            data_strings(item, out)
    elif isinstance(value, list):
        for item in value:
            data_strings(item, out)
    return out


def provenance_problems(result, source, context):
    spans = result["spans"]
    problems = []
    if "".join(text for text, _ in spans) != result["text"]:
        problems.append("spans do not join to the text")
    if any(not text for text, _ in spans) or any(a[1] == b[1] for a, b in zip(spans, spans[1:])):
        problems.append("spans are empty or not merged")
    template_text = "\x00".join(text for text, from_template in spans if from_template)
    for s in data_strings(context, set()):
        if len(s) >= 4 and s not in source and s in template_text:
            problems.append(f"data string {s!r} inside a template span")
    return problems


def compare(name, source, cases, jinja_render):
    """cases: [(label, context)]. Returns (rendered identically, refused by both, failures)."""
    contexts = [context for _, context in cases]
    expected = jinja2_results(source, contexts)
    actual = engine_results(jinja_render, source, contexts)
    same = both_refused = 0
    failures = []
    for (label, context), (ok, reference), result in zip(cases, expected, actual):
        where = f"{name} / {label}"
        if not ok:
            if result["ok"]:
                failures.append(f"{where}: jinja2 raised ({reference}) but the engine rendered")
            else:
                both_refused += 1
            continue
        if not result["ok"]:
            failures.append(f"{where}: the engine failed ({result['error']}) where jinja2 rendered")
        elif result["text"] != reference:
            failures.append(f"{where}: text differs\n  engine: {result['text']!r}\n  jinja2: {reference!r}")
        else:
            problems = provenance_problems(result, source, context)
            failures.extend(f"{where}: {p}" for p in problems)
            same += not problems
    return same, both_refused, failures


def conversation_cases():
    with open(os.path.join(HERE, "conversations.json"), encoding="utf-8") as f:
        conversations = json.load(f)
    return [(c["name"], {**SPECIAL_TOKENS, **c["context"]}) for c in conversations]


def templates_to_check(build_dir):
    """(name, source, cases) for every template we have; prints what is skipped and why."""
    conversations = conversation_cases()
    templates = []
    for file_name in ("gemma-4-31B-it.jinja", "gemma-4-31B-it-interleaved.jinja"):
        path = os.path.join(SHARED_TEMPLATES, file_name)
        if not os.path.exists(path):
            print(f"SKIP {file_name}: ../shared/fixtures/chat-templates is absent")
            continue
        with open(path, encoding="utf-8") as f:
            templates.append((file_name, f.read(), conversations))
    config = os.path.join(build_dir, "tokenizer", "gemma3", "tokenizer_config.json")
    if os.path.exists(config):
        with open(config, encoding="utf-8") as f:
            templates.append(("gemma3 tokenizer_config.json", json.load(f)["chat_template"], conversations))
    else:
        print(f"SKIP Gemma 3 template: {config} is absent (run scripts/fetch_tokenizer.sh)")
    with open(os.path.join(HERE, "features", "contexts.json"), encoding="utf-8") as f:
        feature_contexts = json.load(f)
    for path in sorted(glob.glob(os.path.join(HERE, "features", "*.jinja"))):
        name = os.path.basename(path)[: -len(".jinja")]
        contexts = feature_contexts.get(name, [{}])
        cases = conversations if contexts == "conversations" else [(f"context {i}", c) for i, c in enumerate(contexts)]
        with open(path, encoding="utf-8") as f:
            templates.append((f"features/{name}.jinja", f.read(), cases))
    return templates


def driver_arguments(description):
    """The command line both chat-template tests take: (args, path of the jinja_render driver),
    or (args, None) after saying that the driver is missing."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--gemmakit", required=True, help="the gemmakit binary (locates the build directory)")
    parser.add_argument("--jinja-render", help="the test driver (default: BUILD/tests/chat_template/jinja_render)")
    args = parser.parse_args()
    build_dir = os.path.dirname(os.path.abspath(args.gemmakit))
    jinja_render = args.jinja_render or os.path.join(build_dir, "tests", "chat_template", "jinja_render")
    if not os.path.exists(jinja_render):
        print(f"FAIL: {jinja_render} is missing; build it (cmake --build build --target jinja_render)")
        return args, None
    return args, jinja_render


def main():
    args, jinja_render = driver_arguments(__doc__.split("\n")[0])
    if jinja_render is None:
        return 1
    build_dir = os.path.dirname(os.path.abspath(args.gemmakit))
    failures = []
    total_same = 0
    for name, source, cases in templates_to_check(build_dir):
        same, both_refused, template_failures = compare(name, source, cases, jinja_render)
        print(f"{name}: {same} rendered identically, {both_refused} refused by both, "
              f"{len(template_failures)} failed (of {len(cases)})")
        if same == 0:
            template_failures.append(f"{name}: nothing rendered; the corpus no longer exercises this template")
        failures.extend(template_failures)
        total_same += same
    for failure in failures:
        print(f"FAIL {failure}")
    print(f"{'FAILED' if failures else 'PASSED'}: {total_same} identical renders, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
