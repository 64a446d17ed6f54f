#!/usr/bin/env python3
"""`gemmakit data synth-verilog` end to end, with iverilog as the judge.

Generates tasks, then for every task:
  - the layout: ProbNNN_<name>_{prompt.txt,ref.sv,test.sv}, problems.txt, sft.jsonl rows;
  - the reference renamed to TopModule passes its own testbench, compiled and run the way the
    eval harness does (iverilog -g2012 -o a.out RefModule.sv TopModule.sv test.sv; vvp -n a.out
    -none), with "Mismatches: 0 in N samples", N > 0;
  - mutants fail: each output with its top bit flipped (so every output is really compared); for
    asynchronous resets, the same design with a synchronous reset (so the testbench can tell); and
    the reference of another generated task with the same ports (a nearby but different function);
  - implementations written here, independently of the generator, pass: sequence detectors,
    modulo and range counters, shift registers, priority encoders, and, built from the tables and
    minterm lists parsed out of the prompt text, table FSMs and truth tables. A reference always
    matches its own testbench; these check that it also matches its prose.
Also: same arguments give the same bytes, a second window of the same seed shares no task, and
bad arguments give one "gemmakit: error:" line with exit status 1.

Debian's python3, stdlib only. Usage: synth_verilog_test.py --gemmakit build/gemmakit [--n 60]
"""
import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

INTRO = ("I would like you to implement a module named TopModule with the following\n"
         "interface. All input and output ports are one bit unless otherwise\nspecified.")
RESULT_LINE = '$display("Mismatches: %1d in %1d samples", stats1.errors, stats1.clocks);'
RESULT_RE = re.compile(r"^Mismatches: (\d+) in (\d+) samples$", re.M)
RESPONSE_RE = re.compile(r"\A<think>\n(.+)\n</think>\n<answer>\n```verilog\n(.*)```\n</answer>\Z", re.S)
PORT_RE = re.compile(r"^\s*(input|output)\s+(reg\s+)?(\[\d+:0\]\s+)?(\w+),?\s*$")
TIMEOUT_S = 60

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL:", msg, flush=True)


def run_gemmakit(gemmakit, args):
    return subprocess.run([gemmakit, "data", "synth-verilog"] + args, capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)


def generate(gemmakit, out, args):
    p = run_gemmakit(gemmakit, ["--out", out] + args)
    if p.returncode != 0:
        sys.exit(f"gemmakit data synth-verilog {' '.join(args)} failed ({p.returncode}):\n{p.stderr}")
    return p


def to_top(ref):
    return ref.replace("module RefModule", "module TopModule", 1)


def simulate(ref, top, test):
    """(mismatches, samples, log); mismatches is None when there is no valid result."""
    d = tempfile.mkdtemp(prefix="gk_synth_sim_")
    try:
        for name, text in (("RefModule.sv", ref), ("TopModule.sv", top), ("test.sv", test)):
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        try:
            c = subprocess.run(["iverilog", "-g2012", "-o", "a.out", "RefModule.sv", "TopModule.sv", "test.sv"],
                               cwd=d, capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return None, None, "compile timeout"
        if c.returncode != 0:
            return None, None, "compile error:\n" + c.stdout + c.stderr
        try:
            r = subprocess.run(["vvp", "-n", "a.out", "-none"], cwd=d, capture_output=True, text=True,
                               timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:  # subprocess.run kills the child; a timeout is a failure
            return None, None, "run timeout"
        log = r.stdout + r.stderr
        m = RESULT_RE.findall(log)
        if len(m) != 1 or "TIMEOUT" in log:
            return None, None, "no single result line (or the watchdog fired):\n" + log[-2000:]
        return int(m[0][0]), int(m[0][1]), log
    finally:
        shutil.rmtree(d, ignore_errors=True)


def parse_ports(ref):
    header = ref[ref.index("(") + 1:ref.index(");")]
    ports = []
    for line in header.splitlines():
        if not line.strip():
            continue
        m = PORT_RE.match(line)
        if not m:
            raise ValueError(f"cannot parse port line {line!r}")
        width = int(m.group(3).strip()[1:].split(":")[0]) + 1 if m.group(3) else 1
        ports.append((m.group(1), width, m.group(4)))
    return ports


def flip_msb_mutant(ref, target):
    """A TopModule that wraps the reference and flips the top bit of output `target`."""
    ports = parse_ports(ref)
    decl = lambda d, w, n: f"{d} {'[%d:0] ' % (w - 1) if w > 1 else ''}{n}"
    lines = [to_top(ref).replace("module TopModule", "module MutInner", 1), "module TopModule ("]
    lines.append(",\n".join("  " + decl(d, w, n) for d, w, n in ports))
    lines.append(");")
    for d, w, n in ports:
        if d == "output":
            lines.append(f"  wire {'[%d:0] ' % (w - 1) if w > 1 else ''}{n}_w;")
    conns = ", ".join(f".{n}({n}_w)" if d == "output" else f".{n}({n})" for d, w, n in ports)
    lines.append(f"  MutInner inner ({conns});")
    for d, w, n in ports:
        if d != "output":
            continue
        if n == target:
            lines.append(f"  assign {n} = {n}_w ^ {w}'d{1 << (w - 1)};")
        else:
            lines.append(f"  assign {n} = {n}_w;")
    lines.append("endmodule\n")
    return "\n".join(lines)


def check_layout(out, n):
    data = os.path.join(out, "dataset_spec-to-rtl")
    with open(os.path.join(data, "problems.txt")) as f:
        names = f.read().split()
    if len(names) != n or len(set(names)) != n:
        fail(f"problems.txt lists {len(names)} names ({len(set(names))} distinct), expected {n}")
    with open(os.path.join(out, "sft.jsonl")) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    if len(rows) != n:
        fail(f"sft.jsonl has {len(rows)} rows, expected {n}")
    tasks = []
    for i, name in enumerate(names):
        if not re.fullmatch(r"Prob\d{3,}_[a-z0-9_]+", name):
            fail(f"{name}: not a ProbNNN_<name> name")
        files = {}
        for suffix in ("prompt.txt", "ref.sv", "test.sv"):
            path = os.path.join(data, f"{name}_{suffix}")
            with open(path) as f:
                files[suffix] = f.read()
        prompt, ref, test = files["prompt.txt"], files["ref.sv"], files["test.sv"]
        if not prompt.strip().startswith(INTRO + "\n\n - "):
            fail(f"{name}: prompt does not start with the verilog-eval sentence and port list")
        if len(re.findall(r"^\s*module\s", ref, re.M)) != 1 or not ref.startswith("module RefModule ("):
            fail(f"{name}: ref is not exactly one module RefModule")
        if not test.startswith("`timescale 1 ps/1 ps\n") or test.count(RESULT_LINE) != 1 or \
                test.count('$display("Mismatches: ') != 1:
            fail(f"{name}: testbench lacks the timescale or the single exact Mismatches line")
        for needle in ("module stimulus_gen", "module tb", "RefModule good1 (", "TopModule top_module1 (",
                       "stats1.errors", "stats1.clocks", "TIMEOUT", "final begin"):
            if needle not in test:
                fail(f"{name}: testbench lacks {needle!r}")
        if i < len(rows):
            row = rows[i]
            if list(row.keys()) != ["system", "prompt", "response"]:
                fail(f"{name}: SFT row keys {list(row.keys())}")
            elif row["prompt"] != prompt.strip():
                fail(f"{name}: SFT prompt is not the task's prompt")
            else:
                m = RESPONSE_RE.match(row["response"])
                if not m:
                    fail(f"{name}: SFT response is not <think>..</think><answer>```verilog..```</answer>")
                elif m.group(2) != to_top(ref):
                    fail(f"{name}: SFT answer is not the reference renamed to TopModule")
        tasks.append((name, prompt, ref, test))
    return tasks


def alt_seqdet(slug):
    """An implementation of a seqdet_* spec written independently of the generator's automaton:
    a history of the last L bits plus a count of the bits seen since reset (or, without overlap,
    since the last detection)."""
    m = re.fullmatch(r"seqdet_([01]+)_(moore|mealy)_(ovl|novl)_(sr|ar)", slug)
    if not m:
        return None
    pat, moore, overlap, rst = m.group(1), m.group(2) == "moore", m.group(3) == "ovl", m.group(4)
    l = len(pat)
    rn = "areset" if rst == "ar" else "reset"
    sens = "posedge clk or posedge areset" if rst == "ar" else "posedge clk"
    hit = f"({{hist[{l - 2}:0], x}} == {l}'b{pat}) && (cnt >= {l - 1})"
    after_hit = "0" if not overlap else str(l)
    return f"""module TopModule (input clk, input {rn}, input x, output z);
  reg [{l - 1}:0] hist;
  integer cnt;
  reg zr;
  wire hit = {hit};
  always @({sens}) begin
    if ({rn}) begin
      hist <= 0; cnt <= 0; zr <= 0;
    end else begin
      hist <= {{hist[{l - 2}:0], x}};
      zr <= hit;
      if (hit) cnt <= {after_hit};
      else if (cnt < {l}) cnt <= cnt + 1;
    end
  end
  assign z = {"zr" if moore else "hit"};
endmodule
"""


def alt_counter(slug):
    """A modulo counter written with % arithmetic instead of the generator's wrap comparisons."""
    m = re.fullmatch(r"counter_(up|down|updown)_mod(\d+)(_ena)?_(sr|ar)", slug)
    if not m:
        return None
    d, mod, ena, rst = m.group(1), int(m.group(2)), bool(m.group(3)), m.group(4)
    w = max(1, (mod - 1).bit_length())
    rn = "areset" if rst == "ar" else "reset"
    sens = "posedge clk or posedge areset" if rst == "ar" else "posedge clk"
    up_next, down_next = f"(q + 1) % {mod}", f"(q + {mod - 1}) % {mod}"
    nxt = {"up": up_next, "down": down_next, "updown": f"up ? {up_next} : {down_next}"}[d]
    ports = [f"input {rn}"] + (["input ena"] if ena else []) + (["input up"] if d == "updown" else [])
    return f"""module TopModule (input clk, {", ".join(ports)}, output reg [{w - 1}:0] q);
  always @({sens})
    if ({rn}) q <= {mod - 1 if d == "down" else 0};
    else if ({"ena" if ena else "1"}) q <= {nxt};
endmodule
"""


def header(ref, regs=()):
    """`module TopModule (...);` with the reference's ports; outputs in `regs` declared reg."""
    decls = []
    for d, w, n in parse_ports(ref):
        kind = "output reg" if d == "output" and n in regs else d
        decls.append(f"  {kind} {'[%d:0] ' % (w - 1) if w > 1 else ''}{n}")
    return "module TopModule (\n" + ",\n".join(decls) + "\n);\n"


def clocked(rst):
    """(sensitivity, reset name) for a slug's _sr / _ar / no suffix."""
    if rst == "ar":
        return "posedge clk or posedge areset", "areset"
    return "posedge clk", ("reset" if rst == "sr" else None)


def alt_fsm(slug, ref, prompt):
    """From the state table in the prompt: a table FSM with a different encoding of the logic."""
    m = re.fullmatch(r"fsm(\d)_(moore|mealy)_\d+_(sr|ar)", slug)
    if not m:
        return None
    moore = m.group(2) == "moore"
    rows = [l for l in prompt.splitlines() if re.match(r"^  [A-F]\s+\|", l)]
    idx = lambda c: ord(c) - ord("A")
    nxt, outs = [], []
    for row in rows:
        cells = [c.strip() for c in row.split("|")]
        if moore:
            nxt.append((idx(cells[1]), idx(cells[2])))
            outs.append((int(cells[3]), int(cells[3])))
        else:
            (n0, o0), (n1, o1) = (re.fullmatch(r"([A-F]), out = ([01])", c).groups() for c in cells[1:3])
            nxt.append((idx(n0), idx(n1)))
            outs.append((int(o0), int(o1)))
    sens, rn = clocked(m.group(3))
    cases = "".join(f"      4'd{2 * st + x}: s <= 3'd{nxt[st][x]};\n" for st in range(len(rows)) for x in (0, 1))
    bits = ["0"] * 16
    for st in range(len(rows)):
        for x in (0, 1):
            bits[2 * st + x] = str(outs[st][x])
    return header(ref) + f"""  reg [2:0] s;
  wire [15:0] outs = 16'b{"".join(reversed(bits))};
  always @({sens}) begin
    if ({rn}) s <= 3'd0;
    else case ({{s, in}})
{cases}      default: s <= 3'd0;
    endcase
  end
  assign out = outs[{{s, {"1'b0" if moore else "in"}}}];
endmodule
"""


def alt_truth_table(slug, ref, prompt):
    """From the truth table or the minterm list in the prompt: a constant lookup table."""
    flat = re.sub(r"\s+", " ", prompt)
    if slug.startswith("truthtable3_"):
        ones = [int(a + b + c, 2) for a, b, c, o in re.findall(r"^  ([01]) ([01]) ([01]) \| ([01])$", prompt, re.M)
                if o == "1"]
        n, sel = 3, "{a, b, c}"
    elif slug.startswith("minterms4_"):
        m = re.search(r"out should be 1 when that number is (.+?), and 0 for every other value", flat)
        ones = [int(v) for v in re.split(r", | or ", m.group(1))]
        n, sel = 4, "{a, b, c, d}"
    else:
        return None
    table = "".join("1" if v in ones else "0" for v in reversed(range(1 << n)))
    return (header(ref) + f"  wire [{(1 << n) - 1}:0] table_ = {1 << n}'b{table};\n"
            f"  assign out = table_[{sel}];\nendmodule\n")


def alt_prio(slug, ref, prompt):
    """A priority encoder that stops at the first hit instead of overwriting."""
    m = re.fullmatch(r"prio_(low|high)_w(\d+)(_valid)?", slug)
    if not m:
        return None
    w = int(m.group(2))
    loop = f"for (i = 0; i < {w}; i = i + 1)" if m.group(1) == "low" else f"for (i = {w - 1}; i >= 0; i = i - 1)"
    valid = "  assign valid = in != 0;\n" if m.group(3) else ""
    return header(ref, regs=("pos",)) + f"""  integer i;
  reg found;
  always @(*) begin
    pos = 0;
    found = 0;
    {loop}
      if (!found && in[i]) begin
        pos = i;
        found = 1;
      end
  end
{valid}endmodule
"""


def alt_range_counter(slug, ref, prompt):
    m = re.fullmatch(r"counter_range(\d+)to(\d+)_(sr|ar)", slug)
    if not m:
        return None
    lo, hi = int(m.group(1)), int(m.group(2))
    sens, rn = clocked(m.group(3))
    return header(ref, regs=("q",)) + f"""  always @({sens})
    if ({rn}) q <= {lo};
    else q <= {lo} + (q - {lo} + 1) % {hi - lo + 1};
endmodule
"""


def alt_shift_register(slug, ref, prompt):
    """A serial-in shift register moved one bit at a time in a loop."""
    m = re.fullmatch(r"shiftreg(\d+)_(left|right)(_ena)?(?:_(sr|ar))?", slug)
    if not m:
        return None
    l, left = int(m.group(1)), m.group(2) == "left"
    sens, rn = clocked(m.group(4))
    move = (f"for (i = {l - 1}; i > 0; i = i - 1) q[i] <= q[i - 1];\n      q[0] <= in;" if left else
            f"for (i = 0; i < {l - 1}; i = i + 1) q[i] <= q[i + 1];\n      q[{l - 1}] <= in;")
    reset = f"if ({rn}) q <= 0;\n    else " if rn else ""
    return header(ref, regs=("q",)) + f"""  integer i;
  always @({sens}) begin
    {reset}if ({"ena" if m.group(3) else "1'b1"}) begin
      {move}
    end
  end
endmodule
"""


def sim_jobs(tasks):
    """(label, ref, top, test, expect_pass) for the reference and its mutants."""
    jobs = []
    by_ports = {}
    for name, _, ref, _ in tasks:
        by_ports.setdefault(tuple(parse_ports(ref)), []).append((name, ref))
    for name, prompt, ref, test in tasks:
        # Another task with the same ports is a different function: its reference must fail here.
        siblings = [s for s in by_ports[tuple(parse_ports(ref))] if s[0] != name][:2]
        for sib_name, sib_ref in siblings:
            jobs.append((f"{name} [reference of {sib_name}]", ref, to_top(sib_ref), test, False))
        jobs.append((name, ref, to_top(ref), test, True))
        for d, w, n in parse_ports(ref):
            if d == "output":
                jobs.append((f"{name} [output {n} top bit flipped]", ref, flip_msb_mutant(ref, n), test, False))
        if "posedge areset" in ref:
            sync = to_top(ref).replace(" or posedge areset", "")
            jobs.append((f"{name} [areset made synchronous]", ref, sync, test, False))
        slug = name.split("_", 1)[1]
        alts = [alt_seqdet(slug), alt_counter(slug)]
        alts += [f(slug, ref, prompt) for f in (alt_fsm, alt_truth_table, alt_prio, alt_range_counter,
                                                 alt_shift_register)]
        for alt in alts:
            if alt:
                jobs.append((f"{name} [independent implementation]", ref, alt, test, True))
    return jobs


def run_sims(jobs, workers):
    counts = {"pass": 0, "mutant": 0}
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        results = pool.map(lambda j: (j, simulate(j[1], j[2], j[3])), jobs)
        for (label, _, _, _, expect_pass), (mism, samples, log) in results:
            if mism is None:
                fail(f"{label}: {log}")
            elif expect_pass and (mism != 0 or samples <= 0):
                fail(f"{label}: reference gives Mismatches: {mism} in {samples} samples")
            elif not expect_pass and mism == 0:
                fail(f"{label}: mutant passes ({samples} samples): the testbench cannot see it")
            else:
                counts["pass" if expect_pass else "mutant"] += 1
    return counts


def read_tree(root):
    out = {}
    for dirpath, _, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = fh.read()
    return out


def check_cli(gemmakit, tmp, n, seed):
    # Determinism and disjoint windows.
    a, b, c = (os.path.join(tmp, x) for x in ("a", "b", "c"))
    generate(gemmakit, a, ["--n", str(n), "--seed", str(seed)])
    generate(gemmakit, b, ["--n", str(n), "--seed", str(seed)])
    if read_tree(a) != read_tree(b):
        fail("two runs with the same arguments wrote different files")
    generate(gemmakit, c, ["--n", str(n), "--seed", str(seed), "--first", str(n)])
    slug = lambda name: name.split("_", 1)[1]
    with open(os.path.join(a, "dataset_spec-to-rtl", "problems.txt")) as f:
        first = {slug(x) for x in f.read().split()}
    with open(os.path.join(c, "dataset_spec-to-rtl", "problems.txt")) as f:
        second = {slug(x) for x in f.read().split()}
    if first & second:
        fail(f"--first 0 and --first {n} of seed {seed} share tasks: {sorted(first & second)[:5]}")
    # Writing another window into a used directory would mix two sets: refused.
    p = run_gemmakit(gemmakit, ["--out", a, "--n", str(n), "--seed", str(seed), "--first", str(n)])
    if p.returncode != 1 or not p.stderr.startswith("gemmakit: error: "):
        fail(f"a second window into the same --out: exit {p.returncode}, stderr {p.stderr!r}")
    # Bad arguments.
    blocker = os.path.join(tmp, "a_file")
    with open(blocker, "w") as f:
        f.write("x")
    bad = [["--out", os.path.join(tmp, "z"), "--n", "0"],
           ["--out", os.path.join(tmp, "z"), "--n", "5", "--first", "-1"],
           ["--out", os.path.join(tmp, "z"), "--n", "100000000"],
           ["--out", os.path.join(blocker, "sub"), "--n", "3"]]
    for args in bad:
        p = run_gemmakit(gemmakit, args)
        lines = p.stderr.strip().splitlines()
        if p.returncode != 1 or len(lines) != 1 or not lines[0].startswith("gemmakit: error: "):
            fail(f"{' '.join(args)}: exit {p.returncode}, stderr {p.stderr!r} (want one error line, exit 1)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gemmakit", required=True)
    ap.add_argument("--n", type=int, default=60)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--no-mutants", action="store_true", help="only check that the references pass")
    args = ap.parse_args()
    for tool in ("iverilog", "vvp"):
        if not shutil.which(tool):
            sys.exit(f"{tool} not found (apt-get install iverilog)")
    gemmakit = os.path.abspath(args.gemmakit)
    tmp = tempfile.mkdtemp(prefix="gk_synth_test_")
    try:
        out = os.path.join(tmp, "gen")
        p = generate(gemmakit, out, ["--n", str(args.n), "--seed", str(args.seed), "--first", str(args.first)])
        print(p.stderr.strip(), flush=True)
        tasks = check_layout(out, args.n)
        jobs = sim_jobs(tasks)
        if args.no_mutants:
            jobs = [j for j in jobs if j[4]]
        counts = run_sims(jobs, args.jobs)
        n_pass = sum(1 for j in jobs if j[4])
        print(f"{counts['pass']}/{n_pass} references and independent implementations pass their testbench "
              f"({len(tasks)} tasks); {counts['mutant']}/{len(jobs) - n_pass} mutants are caught", flush=True)
        check_cli(gemmakit, tmp, min(args.n, 20), args.seed)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
