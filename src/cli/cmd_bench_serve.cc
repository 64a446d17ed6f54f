// gemmakit bench serve    — a serving benchmark client equivalent to `vllm bench serve`
// gemmakit bench compare  — side-by-side tables and SVG plots of result files
// gemmakit bench client-check — the client's own overhead against a fixed-rate fake server
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/common.h"
#include "tools/bench_serve/client_check.h"
#include "tools/bench_serve/compare.h"
#include "tools/bench_serve/result_report.h"
#include "tools/bench_serve/serve_bench.h"
#include "util/atomic_file.h"
#include "util/guarded_parse.h"

namespace gk::cli {

namespace {

Result<std::vector<std::pair<std::string, std::string>>> ParsePairs(const std::vector<std::string>& words,
                                                                     const char* flag) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& w : words) {
    const size_t eq = w.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Result<std::vector<std::pair<std::string, std::string>>>::Error(
          StrCat(flag, " ", w, ": expected KEY=VALUE"));
    }
    out.emplace_back(w.substr(0, eq), w.substr(eq + 1));
  }
  return out;
}

// A one-line progress bar on stderr, only when stderr is a terminal (logs stay clean).
void DrawProgress(int done, int total) {
  const int width = 40, filled = total ? done * width / total : width;
  std::fprintf(stderr, "\r%5d/%-5d [%s%s] %3d%%", done, total, std::string(filled, '#').c_str(),
               std::string(width - filled, '.').c_str(), total ? done * 100 / total : 100);
  if (done == total) std::fprintf(stderr, "\n");
  std::fflush(stderr);
}

int RunServeBenchCommand(int argc, char** argv) {
  CLI::App app{"Benchmark an OpenAI-compatible server (gemmakit serve, vLLM, llama.cpp) the way vllm bench serve "
               "does: same prompts, arrival process, metrics, summary and result JSON."};
  bench::ServeBenchOptions o;
  std::string host = "127.0.0.1", rates = "inf", input_lens, burstiness = "1.0", percentile_metrics = "ttft,tpot,itl",
              metric_percentiles = "99", extra_body;
  int port = 8000;
  std::optional<double> temperature, top_p, min_p;
  std::optional<int> top_k, logprobs;
  std::vector<std::string> metadata, headers;
  bool disable_tqdm = false;
  app.add_option("--base-url", o.base_url, "server URL, http://host:port (default: from --host and --port)");
  app.add_option("--host", host, "server host when --base-url is not given");
  app.add_option("--port", port, "server port when --base-url is not given")->check(CLI::Range(1, 65535));
  app.add_option("--endpoint", o.endpoint, "/v1/completions or /v1/chat/completions");
  app.add_option("--model", o.model, "model name to request (default: the first of GET /v1/models)");
  app.add_option("--lora-modules", o.lora_modules,
                 "LoRA adapter names of the server: each timed request asks for one of them as its \"model\"")
      ->expected(1, -1);
  app.add_option("--lora-assignment", o.lora_assignment, "random (seeded by --seed) or round-robin")
      ->check(CLI::IsMember({"random", "round-robin"}));
  app.add_option("--tokenizer", o.tokenizer, "directory with tokenizer.json (or the file); default: --model if a directory");
  app.add_option("--dataset-name", o.dataset_name, "random | jsonl");
  app.add_option("--dataset-path", o.dataset_path, "jsonl: one {\"prompt\": ..., \"output_len\": N} per line");
  app.add_option("--random-input-len,--input-len", o.input_len, "prompt tokens, including <bos>")->check(CLI::Range(1, 1 << 22));
  app.add_option("--random-output-len,--output-len", o.output_len, "tokens to generate")->check(CLI::Range(1, 1 << 22));
  app.add_option("--random-range-ratio", o.range_ratio, "lengths uniform in [L(1-r), L(1+r)]; r in [0, 1)");
  app.add_option("--random-prefix-len", o.prefix_len, "random tokens shared by every prompt")->check(CLI::Range(0, 1 << 22));
  app.add_option("--num-prompts", o.num_prompts, "requests per point")->check(CLI::Range(1, 10000000));
  app.add_option("--request-rate", rates, "requests/s, a list sweeps: 1,2,4,8,16,32,64,inf (inf: all at once)");
  app.add_option("--input-lens", input_lens, "sweep input lengths too: 512,1024,4096 (crossed with the rates)");
  app.add_option("--burstiness", burstiness, "gamma shape of the arrivals: 1 Poisson, <1 burstier, inf constant");
  app.add_option("--max-concurrency", o.max_concurrency, "requests in flight at most (0: no limit)")->check(CLI::Range(0, 1000000));
  app.add_flag("--ignore-eos", o.ignore_eos, "ask the server to ignore EOS (always on for --dataset-name random)");
  app.add_option("--temperature", temperature, "sampling temperature sent with each request (0: greedy)");
  app.add_option("--top-p", top_p, "top_p sent with each request");
  app.add_option("--top-k", top_k, "top_k sent with each request");
  app.add_option("--min-p", min_p, "min_p sent with each request");
  app.add_option("--logprobs", logprobs, "logprobs sent with each request");
  app.add_option("--extra-body", extra_body, "JSON object merged into every request body");
  app.add_option("--seed", o.seed, "prompts and arrivals (point k of a sweep uses seed + k)");
  app.add_option("--goodput", o.goodput, "SLOs in ms: ttft:500 tpot:50 e2el:2000")->expected(1, -1);
  app.add_option("--percentile-metrics", percentile_metrics, "ttft,tpot,itl,e2el (also client_queue_time, "
                                                             "e2el_including_client_queue)");
  app.add_option("--metric-percentiles", metric_percentiles, "percentiles to report: 50,90,99");
  app.add_flag("--save-result", o.save_result, "write each point's result JSON (and a sweep summary)");
  app.add_flag("--save-detailed", o.save_detailed, "also per-request arrays (ttfts, itls, texts, errors)");
  app.add_option("--result-dir", o.result_dir, "directory for result files (created)");
  app.add_option("--result-filename", o.result_filename, "file name instead of vLLM's default");
  app.add_option("--label", o.label, "label in file names and results (default: the endpoint type)");
  app.add_option("--metadata", metadata, "KEY=VALUE pairs recorded in the result (hardware=TPUv6e-8 ...)")->expected(1, -1);
  app.add_option("--header", headers, "KEY=VALUE HTTP headers sent with each request")->expected(1, -1);
  app.add_option("--api-key", o.api_key, "Bearer token (default: $OPENAI_API_KEY)");
  app.add_option("--num-warmups", o.num_warmups, "uncounted warm-up requests before each point")->check(CLI::Range(0, 100000));
  app.add_option("--ready-check-timeout-sec", o.ready_check_timeout_s,
                 "send request 0 first and wait this long for the server (0: skip)")->check(CLI::Range(0.0, 1e6));
  app.add_option("--request-timeout", o.request_timeout_s, "seconds a request may take")->check(CLI::Range(0.001, 1e7));
  app.add_option("--request-id-prefix", o.request_id_prefix, "x-request-id prefix (default bench-<8 hex>-)");
  app.add_flag("--disable-tqdm", disable_tqdm, "no progress bar");
  CLI11_PARSE(app, argc, argv);

  if (app.count("--base-url") == 0) o.base_url = StrCat("http://", host, ":", port);
  if (o.api_key.empty()) {
    if (const char* k = std::getenv("OPENAI_API_KEY")) o.api_key = k;
  }
  auto parsed_rates = bench::ParseRates(rates);
  if (!parsed_rates.ok()) return Fail(parsed_rates.status());
  o.request_rates = *parsed_rates;
  if (!input_lens.empty()) {
    auto ids = ParseIdList(input_lens);
    if (!ids.ok()) return Fail(ids.status().Wrap("--input-lens"));
    for (int32_t v : *ids) {
      if (v < 1) return Fail("--input-lens: lengths must be >= 1");
      o.input_lens.push_back(v);
    }
  }
  if (burstiness == "inf") {
    o.burstiness = 1.0 / 0.0;
  } else {
    char* end = nullptr;
    o.burstiness = std::strtod(burstiness.c_str(), &end);
    if (*end || !(o.burstiness > 0)) return Fail(StrCat("--burstiness ", burstiness, ": expected a number > 0 or inf"));
  }
  o.percentile_metrics = SplitCommas(percentile_metrics);
  o.metric_percentiles.clear();
  for (const auto& w : SplitCommas(metric_percentiles)) {
    char* end = nullptr;
    const double p = std::strtod(w.c_str(), &end);
    if (*end) return Fail(StrCat("--metric-percentiles: '", w, "' is not a number"));
    o.metric_percentiles.push_back(p);
  }
  o.sampling.temperature = temperature;
  o.sampling.top_p = top_p;
  o.sampling.top_k = top_k;
  o.sampling.min_p = min_p;
  o.sampling.logprobs = logprobs;
  if (!extra_body.empty()) {
    auto body = ParseJson(extra_body, "--extra-body");
    if (!body.ok()) return Fail(body.status());
    if (!body->is_object()) return Fail("--extra-body: expected a JSON object");
    o.sampling.extra_body = std::move(body).value();
  }
  auto md = ParsePairs(metadata, "--metadata");
  if (!md.ok()) return Fail(md.status());
  o.metadata = *md;
  auto hd = ParsePairs(headers, "--header");
  if (!hd.ok()) return Fail(hd.status());
  o.headers = *hd;
  std::string cmd = "gemmakit bench";
  for (int i = 0; i < argc; ++i) {
    if (std::string(argv[i]).find("api-key") != std::string::npos) break;  // never record secrets
    cmd += StrCat(" ", argv[i]);
  }
  o.command_line = cmd;
  if (!disable_tqdm && isatty(STDERR_FILENO)) o.progress = DrawProgress;

  auto r = bench::RunServeBench(o, [](const std::string& text) {
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
  });
  if (!r.ok()) return Fail(r.status());
  for (const auto& f : r->files_written) std::printf("wrote %s\n", f.c_str());
  return 0;
}

int RunCompare(int argc, char** argv) {
  CLI::App app{"Compare benchmark results side by side (Markdown) and plot them (SVG)."};
  std::vector<std::string> files;
  std::string labels, plots_dir, out;
  std::optional<double> at_rate;
  app.add_option("files", files, "result or sweep JSON files (two or more)")->required()->expected(2, -1);
  app.add_option("--labels", labels, "column labels, comma-separated (default: file names)");
  app.add_option("--at-rate", at_rate, "sweeps: request rate at which latencies are compared");
  app.add_option("--plots-dir", plots_dir, "write throughput and TTFT vs request rate SVGs here");
  app.add_option("--out", out, "write the Markdown to this file as well");
  CLI11_PARSE(app, argc, argv);
  const std::vector<std::string> names = SplitCommas(labels);
  if (!labels.empty() && names.size() != files.size()) {
    return Fail(StrCat("--labels has ", names.size(), " labels for ", files.size(), " files"));
  }
  std::vector<bench::CompareInput> inputs;
  for (size_t i = 0; i < files.size(); ++i) {
    auto in = bench::LoadCompareInput(files[i], names.empty() ? "" : names[i]);
    if (!in.ok()) return Fail(in.status());
    inputs.push_back(std::move(*in));
  }
  bench::CompareOptions co;
  co.at_rate = at_rate;
  auto md = bench::CompareMarkdown(inputs, co);
  if (!md.ok()) return Fail(md.status());
  std::fputs(md->c_str(), stdout);
  if (!out.empty()) {
    if (Status s = WriteFileAtomic(out, *md); !s.ok()) return Fail(s);
  }
  if (!plots_dir.empty()) {
    auto plots = bench::ComparePlots(inputs);
    if (!plots.ok()) return Fail(plots.status());
    std::error_code ec;
    std::filesystem::create_directories(plots_dir, ec);
    if (ec) return Fail(StrCat("--plots-dir ", plots_dir, ": ", ec.message()));
    for (const auto& [name, svg] : *plots) {
      const std::string path = plots_dir + "/" + name;
      if (Status s = WriteFileAtomic(path, svg); !s.ok()) return Fail(s);
      std::printf("wrote %s\n", path.c_str());
    }
  }
  return 0;
}

int RunClientCheck(int argc, char** argv) {
  CLI::App app{"Measure the benchmark client's own overhead: stream from an in-process fake server at a fixed "
               "rate and compare each chunk's arrival with the time the server wrote it."};
  bench::ClientCheckOptions o;
  double ttft_ms = o.ttft_s * 1e3, itl_ms = o.itl_s * 1e3;
  app.add_option("--streams", o.streams, "concurrent streams")->check(CLI::Range(1, 20000));
  app.add_option("--ttft-ms", ttft_ms, "fake server delay before the first chunk")->check(CLI::Range(0.0, 1e6));
  app.add_option("--itl-ms", itl_ms, "fake server gap between chunks")->check(CLI::Range(0.0, 1e6));
  app.add_option("--tokens", o.tokens, "tokens per request")->check(CLI::Range(1, 100000));
  app.add_flag("--chat", o.chat, "use /v1/chat/completions");
  CLI11_PARSE(app, argc, argv);
  o.ttft_s = ttft_ms / 1e3;
  o.itl_s = itl_ms / 1e3;
  auto r = bench::RunClientCheck(o);
  if (!r.ok()) return Fail(r.status());
  const auto& m = r->metrics;
  std::printf("streams %d (peak %d open at the server), %lld chunks matched\n", o.streams, r->peak_server_streams,
              r->chunks_matched);
  std::printf("%-34s %10s %10s %10s\n", "", "configured", "median", "P99");
  std::printf("%-34s %10.2f %10.2f %10.2f\n", "TTFT (ms)", ttft_ms, m.ttft.median_ms, m.ttft.percentiles_ms[1].second);
  std::printf("%-34s %10.2f %10.2f %10.2f\n", "ITL (ms)", itl_ms, m.itl.median_ms, m.itl.percentiles_ms[1].second);
  std::printf("%-34s %10s %10.3f %10.3f\n", "server received - client start (ms)", "", r->setup_median_ms,
              r->setup_p99_ms);
  std::printf("%-34s %10s %10.3f %10.3f   (max %.3f)\n", "chunk arrival - server write (ms)", "0", r->delay_median_ms,
              r->delay_p99_ms, r->delay_max_ms);
  std::printf("completed %d, failed %d\n", m.completed, m.failed);
  std::fputs(bench::FormatClientOverhead(r->run).c_str(), stdout);
  return m.failed == 0 ? 0 : Fail(StrCat(m.failed, " of ", o.streams, " streams failed"));
}

}  // namespace

int RunBenchServe(int argc, char** argv) { return RunServeBenchCommand(argc, argv); }
int RunBenchCompare(int argc, char** argv) { return RunCompare(argc, argv); }
int RunBenchClientCheck(int argc, char** argv) { return RunClientCheck(argc, argv); }

}  // namespace gk::cli
