// The console summary and the result JSON of one benchmark point, laid out and named as
// `vllm bench serve` prints and saves them (vllm/benchmarks/serve.py; shared/spec/serving.md
// §1.7, §1.8), so results from either tool can be read by the same scripts. Our own fields
// (server, client machine, flags, the client's own overhead) go under one "gemmakit" key.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/bench_serve/bench_runner.h"
#include "tools/bench_serve/metrics.h"

namespace gk::bench {

struct PointSetup {
  std::string date;           // "20261203-081500", as vLLM's current_dt
  std::string endpoint_type;  // "openai" (completions) or "openai-chat"
  std::string label;          // "" uses endpoint_type, as vLLM's backend default
  std::string model_id, tokenizer_id;
  int num_prompts = 0;
  double request_rate = 0;    // may be inf
  double burstiness = 1;
  int max_concurrency = 0;    // 0: none
  std::vector<std::string> percentile_metrics = {"ttft", "tpot", "itl"};
  std::vector<double> percentiles = {99};
  GoodputSlo goodput;
  std::vector<std::pair<std::string, std::string>> metadata;  // --metadata k=v, added at top level
  bool save_detailed = false;
  nlohmann::ordered_json gemmakit = nlohmann::ordered_json::object();  // our run metadata
};

std::string FormatSummary(const BenchMetrics& m, const RunResult& run, const PointSetup& setup);
// One line on the client's own cost: CPU per SSE message and share of a core.
std::string FormatClientOverhead(const RunResult& run);
nlohmann::ordered_json ResultJson(const BenchMetrics& m, const RunResult& run, const PointSetup& setup);
// vLLM's default name: {label}-{rate}qps[-concurrency{N}]-{model basename}-{date}.json
std::string ResultFileName(const PointSetup& setup);
// The rate as vLLM prints it in names and JSON: "inf" or Python's str(float) ("4.0", "0.5").
std::string RateText(double rate);

}  // namespace gk::bench
