// `bench train --compare-torch`: the tuned PyTorch anchor (bench/train_torch_eager.py: the
// oracle's LoRA model in eager PyTorch, tcmalloc, OMP_WAIT_POLICY=PASSIVE, the same threads,
// shapes and token distribution) run back to back with gemmakit's trainer, alternating, since
// this kind of machine is noisy: the ratio of medians is what docs/PERF.md reports.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/bench/train_bench.h"
#include "util/result.h"

namespace gk {

struct TorchAnchorOptions {
  std::string python = "/usr/bin/python3";
  std::string script = "bench/train_torch_eager.py";
  std::vector<std::string> dtypes = {"bf16", "fp32"};  // torch runs per alternation
  int alternations = 3;
};

struct TorchComparison {
  std::vector<double> gemmakit_tokens_per_s;                    // per alternation
  std::vector<std::pair<std::string, std::vector<double>>> torch_tokens_per_s;  // per dtype, per alternation
  std::vector<nlohmann::json> torch_runs;                       // the script's JSON objects
  TrainBenchResult last;                                        // gemmakit's last alternation
};

// The script and the Python are there.
Status CheckAnchorRuns(const TorchAnchorOptions& a);
// One run of the anchor: its JSON object. Errors: the script missing or failing (its stderr's
// last line), unparsable output.
Result<nlohmann::json> RunTorchAnchor(const TorchAnchorOptions& a, const TrainBenchOptions& o, const std::string& dtype);
Result<TorchComparison> CompareWithTorch(const TrainBenchOptions& o, const TorchAnchorOptions& a);
std::string FormatTorchComparison(const TorchComparison& c, const std::string& precision);
nlohmann::json TorchComparisonToJson(const TorchComparison& c);

}  // namespace gk
