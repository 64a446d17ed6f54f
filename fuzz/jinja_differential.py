#!/usr/bin/python3
"""Renders the templates of jinja_template_fuzz corpora with gemmakit's Jinja engine and with
Python's jinja2 set up as transformers sets it up (tests/chat_template/oracle_test.py), over the
conversation the fuzz target uses, and sorts every input by how the two compare:

    /usr/bin/python3 fuzz/jinja_differential.py --gemmakit build/gemmakit [CORPUS_DIR...]

(by default the committed seeds, fuzz/corpus/jinja_template_fuzz: the ctest
chat_template_fuzz_seeds; bench/fuzz.sh's working corpus is where the fuzzer's finds are)

  same                    both render the same text
  both refuse             both raise (the messages may differ)
  object repr             texts differ only where Python prints an object with its address
                          (<built-in method copy of dict object at 0x...>), which the engine
                          cannot reproduce; jinja2's lazy filters (map, select, items...) return
                          generators here that print as the engine prints them, <generator object>
  not UTF-8, jinja2 hung  skipped: jinja2 takes str, and has no step limit (3 s here)
  engine: not supported   jinja2 renders, the engine refuses a feature it leaves out
  engine: lazy            jinja2 renders because its lazy filters never evaluated a bad argument
                          (an unconsumed generator, or one over nothing); the engine evaluates
                          arguments at once and raises, as jinja2 does with those filters eager
  engine: unclosed {#     the template ends in `{#` (and at most a `-` or newline): jinja2's lexer
                          drops it, the engine refuses it as a damaged template, on purpose
  TEXT DIFFERS, ENGINE RENDERS / JINJA2 RAISES, ENGINE RAISES / JINJA2 RENDERS: findings,
                          printed with the template; the exit status is 1 if there are any.

The fuzzer finds inputs; this finds where the engine is not jinja2. A finding becomes a case in
tests/chat_template/features/ (checked against jinja2 by oracle_test.py) and a unit test.
"""

import argparse
import collections
import functools
import json
import os
import re
import resource
import signal
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "chat_template"))
import oracle_test  # noqa: E402  (jinja2's environment and the engine's driver)

# fuzz/jinja_template_fuzz.cc's conversation; its strings get U+E000 appended as there.
with open(os.path.join(HERE, "jinja_template_context.json"), encoding="utf-8") as f:
    CONTEXT = json.load(f)

OBJECT_REPR = re.compile(r"<[^<>]*(object|method)[^<>]*>")
LAZY_FILTERS = ("map", "select", "reject", "selectattr", "rejectattr", "items", "unique", "reverse")
UNCLOSED_COMMENT_AT_END = re.compile(r"\{#[-+]?\n?\Z")


def marked(value, key=None):
    if isinstance(value, str):
        return value if key in ("role", "type") else value + "\ue000"
    if isinstance(value, dict):
        return {k: marked(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [marked(v) for v in value]
    return value


class Hung(Exception):
    pass


class Generator:
    """A generator that prints as the engine prints one (Python adds its name and address)."""

    def __init__(self, items):
        self.items = iter(items)

    def __iter__(self):
        return self

    def __next__(self):
        return next(self.items)

    def __repr__(self):
        return "<generator object>"

    __str__ = __repr__


def environment(eager=False):
    """transformers' environment, its lazy filters' generators wrapped in Generator, or, eager,
    drained into lists at once (so that a bad argument raises as it does in the engine)."""
    env = oracle_test.transformers_environment()
    for name in LAZY_FILTERS:
        original = env.filters[name]

        @functools.wraps(original)  # (keeps jinja2's pass_context marks)
        def lazy(*args, _original=original, **kwargs):
            result = _original(*args, **kwargs)
            if not isinstance(result, (types.GeneratorType, reversed)):
                return result
            return list(result) if eager else Generator(result)

        env.filters[name] = lazy
    return env


def jinja2_result(env, source, context):
    """(True, text), (False, error), or None when jinja2 hangs or exhausts memory."""
    def on_alarm(*_):
        raise Hung()
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(3)
    try:
        try:
            template = env.from_string(source)
        except (Hung, MemoryError, RecursionError):
            raise
        except Exception as e:  # noqa: BLE001 -- any compile error counts as "jinja2 refuses"
            return False, f"{type(e).__name__}: {e}"
        try:
            return True, template.render(**context)
        except (Hung, MemoryError, RecursionError):
            raise
        except Exception as e:  # noqa: BLE001 -- any render error counts as "jinja2 raises"
            return False, f"{type(e).__name__}: {e}"
    except (Hung, MemoryError, RecursionError):
        return None
    finally:
        signal.alarm(0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gemmakit", required=True, help="the gemmakit binary (locates jinja_render beside it)")
    parser.add_argument("corpus", nargs="*", default=[os.path.join(HERE, "corpus", "jinja_template_fuzz")],
                        help="directories of jinja_template_fuzz inputs")
    args = parser.parse_args()
    build_dir = os.path.dirname(os.path.abspath(args.gemmakit))
    render = os.path.join(build_dir, "tests", "chat_template", "jinja_render")
    if not os.path.exists(render):
        sys.exit(f"jinja_differential: {render} is missing (cmake --build build --target jinja_render)")
    resource.setrlimit(resource.RLIMIT_AS, (6 << 30, 6 << 30))  # jinja2 has no output limit
    context = marked(CONTEXT)
    env, eager_env = environment(), environment(eager=True)
    counts = collections.Counter()
    findings = []
    for directory in args.corpus:
        for name in sorted(os.listdir(directory)):
            raw = open(os.path.join(directory, name), "rb").read().split(b"\0", 1)[0]
            try:
                source = raw.decode("utf-8")
            except UnicodeDecodeError:
                counts["not UTF-8"] += 1
                continue
            reference = jinja2_result(env, source, context)
            if reference is None:
                counts["jinja2 hung"] += 1
                continue
            ok, expected = reference
            result = oracle_test.engine_results(render, source, [context])[0]
            if ok and result["ok"]:
                if result["text"] == expected:
                    counts["same"] += 1
                elif OBJECT_REPR.sub("", result["text"]) == OBJECT_REPR.sub("", expected):
                    counts["object repr"] += 1
                else:
                    counts["TEXT DIFFERS"] += 1
                    findings.append((name, source, f"engine {result['text'][:200]!r}\n  jinja2 {expected[:200]!r}"))
            elif not ok and not result["ok"]:
                counts["both refuse"] += 1
            elif ok:
                if "not supported" in result["error"]:
                    counts["engine: not supported"] += 1
                elif UNCLOSED_COMMENT_AT_END.search(source) and "end of comment" in result["error"]:
                    counts["engine: unclosed {#"] += 1
                elif (jinja2_result(eager_env, source, context) or (True,))[0] is False:
                    counts["engine: lazy"] += 1
                else:
                    counts["ENGINE RAISES / JINJA2 RENDERS"] += 1
                    findings.append((name, source, f"engine {result['error'][:200]}\n  jinja2 {expected[:200]!r}"))
            else:
                counts["ENGINE RENDERS / JINJA2 RAISES"] += 1
                findings.append((name, source, f"engine {result['text'][:200]!r}\n  jinja2 {expected[:200]}"))
    for name, source, what in findings:
        print(f"--- {name}: {source[:300]!r}\n  {what}")
    print(json.dumps(dict(counts)))
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
