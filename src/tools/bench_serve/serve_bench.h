// `gemmakit bench serve`: build the prompts, run every (input length, request rate) point
// against an OpenAI-compatible server, print vLLM's summary for each, save vLLM-shaped result
// files, and for sweeps a summary (sweep.h).
//
// Deliberate differences from `vllm bench serve`, all in docs/BENCH_SERVE.md:
//  - prompts come from our own generator (same algorithm, other random numbers);
//  - each point of a sweep uses seed + its index, so no point hits another's prefix cache;
//  - streams that end without [DONE] or with non-JSON data fail the request;
//  - the console and the JSON add the client's own overhead.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tools/bench_serve/bench_runner.h"
#include "tools/bench_serve/metrics.h"
#include "tools/bench_serve/sweep.h"

namespace gk::bench {

struct ServeBenchOptions {
  std::string base_url = "http://127.0.0.1:8000";
  std::string endpoint = "/v1/completions";
  std::string model;          // "": the first id of GET /v1/models
  std::vector<std::string> lora_modules;  // adapters the timed requests name (bench_runner.h)
  std::string lora_assignment = "random";  // random | round-robin
  std::string tokenizer;      // a directory with tokenizer.json, or the file; "": --model if it is a directory
  std::string dataset_name = "random";  // random | jsonl
  std::string dataset_path;   // jsonl
  int input_len = 1024, output_len = 128;
  double range_ratio = 0.0;
  int prefix_len = 0;
  int num_prompts = 1000;
  std::vector<double> request_rates = {1.0 / 0.0};
  std::vector<int> input_lens;  // empty: {input_len}
  double burstiness = 1.0;
  int max_concurrency = 0;
  bool ignore_eos = false;     // forced on for the random dataset, as vLLM (PR #28227)
  SamplingFlags sampling;
  uint64_t seed = 0;
  std::vector<std::string> goodput;  // "ttft:500" words
  std::vector<std::string> percentile_metrics = {"ttft", "tpot", "itl"};
  std::vector<double> metric_percentiles = {99};
  bool save_result = false, save_detailed = false;
  std::string result_dir, result_filename, label;
  std::vector<std::pair<std::string, std::string>> metadata;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string api_key;
  int num_warmups = 0;
  double ready_check_timeout_s = 600;
  double request_timeout_s = 6 * 3600;
  std::string request_id_prefix;  // "": bench-<8 hex>-
  std::string command_line;       // recorded in the results
  std::function<void(int, int)> progress;  // (finished, total) of the current point
};

struct ServeBenchResult {
  std::vector<SweepPoint> points;
  std::vector<std::string> files_written;
};

// print receives the text to show as it is produced (setup lines, each point's summary).
Result<ServeBenchResult> RunServeBench(const ServeBenchOptions& options,
                                       const std::function<void(const std::string&)>& print);

// Parses "1,2,4,inf" (each > 0).
Result<std::vector<double>> ParseRates(const std::string& text);

}  // namespace gk::bench
