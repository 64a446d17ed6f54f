#!/usr/bin/env python3
"""`gemmakit report` end to end, checked in a real browser: two runs of the tiny model (all
cores and one thread), each with a short LoRA training run, a `bench serve` sweep against its
own `gemmakit serve`, and (run A only) an `eval verilog` through it; then the report of both,
loaded in headless Chromium. Asserts: the page renders with its tables (--dump-dom), every
chart <svg> has data marks, a screenshot is not blank, and Chromium logs no console message
(the page has no script, so any console line is an error). Then bad input: one error line.

    report_browser_test.py --gemmakit build/gemmakit [--chromium /usr/bin/chromium]

Exit status 77 (a ctest skip) when Chromium is not installed.
"""
import argparse
import html.parser
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "serve"))
from serve_harness import SOURCE_DIR, ServeProcess, check, fail, make_tiny_model  # noqa: E402

RECIPE = os.path.join(SOURCE_DIR, "recipes", "tiny-verilog-lora.toml")


def run(gk, *args, ok=True, timeout=600):
    p = subprocess.run([gk, *args], capture_output=True, text=True, timeout=timeout)
    if ok and p.returncode != 0:
        fail(f"gemmakit {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def make_run(gk, model, train_data, eval_data, run_dir, threads, label, with_eval):
    """One RUN_DIR: training, a bench sweep, optionally an eval, and run.json."""
    run(gk, "train", "--config", RECIPE, "--threads", str(threads), "--set", f"model={model}",
        "--set", f"data={train_data}/sft.jsonl", "--set", f"out={run_dir}/train", "--set", "batch.max_steps=4",
        "--set", "checkpoint.save_every=4")
    server = ServeProcess(gk, model, ["--served-model-name", "tiny", "--max-model-len", "512"])
    server.cmd[server.cmd.index("--threads") + 1] = str(threads)
    with server:
        run(gk, "bench", "serve", "--base-url", server.base_url, "--model", "tiny", "--tokenizer", model,
            "--random-input-len", "32", "--random-output-len", "8", "--num-prompts", "8",
            "--request-rate", "8,inf", "--temperature", "0", "--label", label, "--disable-tqdm",
            "--save-result", "--result-dir", f"{run_dir}/bench")
        if with_eval:
            run(gk, "eval", "verilog", "--dataset", eval_data, "--base-url", server.base_url, "--model", "tiny",
                "--n-samples", "2", "--max-tokens", "32", "--k", "1,2", "--out", f"{run_dir}/eval")
    with open(os.path.join(run_dir, "run.json"), "w") as f:
        json.dump({"label": label, "price_per_hour": 0.05 * threads}, f)


class Dom(html.parser.HTMLParser):
    """Tables (caption and rows of cell text) and, per <svg>, its count of data marks."""

    def __init__(self):
        super().__init__()
        self.captions, self.cells, self.svgs = [], [], []
        self.svg_depth, self.rects, self.text_target = 0, 0, None

    def handle_starttag(self, tag, attrs):
        if tag == "svg":
            self.svg_depth += 1
            self.svgs.append(0)
            self.rects = 0
        elif self.svg_depth and tag in ("circle", "polyline", "path"):
            self.svgs[-1] += 1
        elif self.svg_depth and tag == "rect":
            self.rects += 1
            if self.rects > 1:  # the first rect of each chart is its white background
                self.svgs[-1] += 1
        elif tag == "caption":
            self.text_target = self.captions
            self.captions.append("")
        elif tag == "td":
            self.text_target = self.cells
            self.cells.append("")

    def handle_endtag(self, tag):
        if tag == "svg":
            self.svg_depth -= 1
        elif tag in ("caption", "td"):
            self.text_target = None

    def handle_data(self, data):
        if self.text_target is not None:
            self.text_target[-1] += data


def console_lines(stderr):
    return [l for l in stderr.splitlines() if ":CONSOLE" in l or "Uncaught" in l]


def chromium(browser, *args, timeout=120):
    return subprocess.run([browser, "--headless", "--disable-gpu", "--no-sandbox", "--enable-logging=stderr",
                           "--v=0", *args], capture_output=True, text=True, timeout=timeout)


def png_pixels(path):
    """(width, height, rows of RGB(A) bytes) of an 8-bit RGB or RGBA PNG, with stdlib zlib only."""
    data = open(path, "rb").read()
    check(data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG")
    pos, idat, width = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            check(depth == 8 and color in (2, 6), f"{path}: PNG depth {depth} color type {color} not handled")
            bpp = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, bpp, rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gemmakit", required=True)
    ap.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    a = ap.parse_args()
    gk, browser = a.gemmakit, a.chromium
    if not (os.path.isfile(browser) and os.access(browser, os.X_OK)):
        print(f"SKIP: no Chromium at {browser} (apt-get install chromium, or scripts/install_deps.sh)")
        sys.exit(77)

    with tempfile.TemporaryDirectory(prefix="gk-report-") as tmp:
        # The detector first: a page with a script error must show up in Chromium's log.
        bad = os.path.join(tmp, "bad.html")
        open(bad, "w").write("<html><body><script>undefined_function();</script></body></html>")
        check(console_lines(chromium(browser, "--dump-dom", "file://" + bad).stderr),
              "Chromium logged no console line for a page with a script error: the console check cannot work")

        model = make_tiny_model(gk, os.path.join(tmp, "tiny"))
        run(gk, "data", "synth-verilog", "--out", f"{tmp}/train-data", "--n", "8", "--seed", "1", "--first", "3")
        run(gk, "data", "synth-verilog", "--out", f"{tmp}/eval-data", "--n", "3", "--seed", "1")
        cores = os.cpu_count() or 2
        a_dir, b_dir = f"{tmp}/runs/a", f"{tmp}/runs/b"
        make_run(gk, model, f"{tmp}/train-data", f"{tmp}/eval-data", a_dir, cores, f"CPU {cores} threads", True)
        make_run(gk, model, f"{tmp}/train-data", f"{tmp}/eval-data", b_dir, 1, "CPU 1 thread <b>", False)

        out = f"{tmp}/out/report.html"
        p = run(gk, "report", a_dir, b_dir, "--out", out, "--title", "report test")
        check(f"report: {out}" in p.stdout, f"report did not say where it wrote the page: {p.stdout}")
        check(os.path.exists(f"{tmp}/out/report.md"), "no report.md beside the page")

        # 1. The DOM: the tables with numbers from the artifacts, the escaped label, the charts.
        r = chromium(browser, "--dump-dom", "file://" + out)
        check(r.returncode == 0 and "</html>" in r.stdout, f"chromium --dump-dom failed ({r.returncode}):\n{r.stderr[-2000:]}")
        dom = Dom()
        dom.feed(r.stdout)
        for caption in ("Runs", "Training", "Evaluation (verilog-eval spec-to-RTL)", "Serving by context length",
                        "Serving cost", "Total cost of ownership"):
            check(caption in dom.captions, f"no table '{caption}' in the rendered page: {dom.captions}")
        check(any(c.startswith("Relative advantage: CPU 1 thread <b> vs") for c in dom.captions),
              f"no relative-advantage table: {dom.captions}")
        check("<b>" not in r.stdout.replace("&lt;b&gt;", ""), "a label from run.json became markup")
        a_run = json.load(open(f"{a_dir}/train/training_run.json"))
        check(f"{a_run['tokens']:,}" in dom.cells, f"tokens trained {a_run['tokens']:,} not in the page's cells")
        check("not measured" in dom.cells, "run B has no eval: its cells must say 'not measured'")
        # loss, grad norm, pass@1 per problem, score distribution, throughput and TTFT, advantage
        check(len(dom.svgs) == 7, f"expected 7 charts, the page has {len(dom.svgs)}")
        check(all(n > 0 for n in dom.svgs), f"a chart without data marks: marks per chart {dom.svgs}")
        check(not console_lines(r.stderr), "console messages:\n" + "\n".join(console_lines(r.stderr)))

        # 2. A screenshot that is not blank: some pixels are far from white, in several colours.
        shot = f"{tmp}/shot.png"
        r = chromium(browser, f"--screenshot={shot}", "--window-size=1280,2400", "file://" + out)
        check(r.returncode == 0 and os.path.exists(shot), f"chromium --screenshot failed ({r.returncode}):\n{r.stderr[-2000:]}")
        check(not console_lines(r.stderr), "console messages:\n" + "\n".join(console_lines(r.stderr)))
        w, h, bpp, rows = png_pixels(shot)
        dark, colours = 0, set()
        for row in rows[::4]:
            for x in range(0, w * bpp, 4 * bpp):
                px = row[x:x + 3]
                colours.add(px)
                dark += min(px) < 200
        check(dark > 500, f"the screenshot is (nearly) blank: {dark} dark pixels sampled")
        check(len(colours) > 8, f"the screenshot has only {len(colours)} colours")

        # Prices from the hardware catalog: each run's cost at its machine's hourly rate.
        hw_out = f"{tmp}/hw/report.html"
        run(gk, "report", a_dir, b_dir, "--out", hw_out, "--hardware", "tpu-v5p-8,a3-highgpu-2g")
        md = open(f"{tmp}/hw/report.md").read()
        hours = a_run["wall_time_s"] / 3600
        cents = int(hours * 16.80 * 100 + 0.5)  # Dollars(): half away from zero at the cent
        want = f"${cents // 100}.{cents % 100:02d}" if hours * 16.80 >= 0.005 else None
        check("$16.80" in md and "$22.12" in md, "--hardware: the catalog's $16.80/h and $22.12/h are not in report.md")
        check(want is None or want in md, f"--hardware: run A's training cost {want} not in report.md")

        # 3. Bad input: one error line, non-zero exit, no page.
        for args, want in (([a_dir], "at least two RUN_DIRs"),
                           ([a_dir, b_dir, "--hardware", "tpu-v5p-8,no-such-machine"], "tpu-v6e-8"),
                           ([a_dir, b_dir, "--hardware", "tpu-v5p-8"], "--hardware has 1 names for 2 RUN_DIRs"),
                           ([a_dir, f"{tmp}/eval-data/dataset_spec-to-rtl"], "no artifacts found"),
                           ([a_dir, b_dir, "--label", "x"], "--label has 1 labels for 2 RUN_DIRs")):
            bad_out = f"{tmp}/bad/report.html"
            p = run(gk, "report", *args, "--out", bad_out, ok=False)
            lines = p.stderr.strip().splitlines()
            check(p.returncode != 0 and len(lines) == 1 and want in lines[0] and lines[0].startswith("gemmakit: error: "),
                  f"report {args}: status {p.returncode}, stderr {p.stderr!r}")
            check(not os.path.exists(bad_out), f"report {args} wrote a page")
        with open(f"{b_dir}/train/training_run.json", "a") as f:
            f.write("{")
        p = run(gk, "report", a_dir, b_dir, "--out", f"{tmp}/bad/report.html", ok=False)
        check(p.returncode != 0 and "not valid JSON" in p.stderr and len(p.stderr.strip().splitlines()) == 1,
              f"malformed training_run.json: status {p.returncode}, stderr {p.stderr!r}")
    print("report browser test: OK")


if __name__ == "__main__":
    main()
