// `gemmakit bench compare A.json B.json [--labels TPU,GPU]`: the side-by-side tables of the
// reference case and SVG plots, from result files written by `gemmakit bench serve` (or by
// `vllm bench serve --save-result`: a point result uses vLLM's field names).
//
// Two kinds of input file:
//  - a point result: one run's JSON with vLLM's keys (request_rate is a number or "inf",
//    output_throughput, max_output_tokens_per_s, median_ttft_ms, p99_itl_ms, ...);
//  - a sweep summary ("gemmakit_sweep": 1): {"points": [{input_len, output_len, request_rate,
//    <every scalar field of that point's result>}...], "summary": [{input_len,
//    saturation_request_rate (number or null), best_output_throughput,
//    best_output_throughput_request_rate, peak_output_tokens_per_s}...]}.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/result.h"

namespace gk::bench {

struct CompareInput {
  std::string label;    // column heading ("TPU", or the file name without .json)
  nlohmann::json doc;   // the parsed file
};

struct CompareOptions {
  // For sweeps: the request rate at which latencies (TTFT, TPOT, ITL) are compared, as the
  // reference case's "TTFT/TPOT at 4 requests/s". Unset: the lowest rate all inputs share.
  std::optional<double> at_rate;
};

// Markdown: for each metric a row "metric | A | B | winner | ratio" (ratio = better / worse,
// >= 1, so 1.61x means the winner is 1.61 times better; throughputs: higher wins; latencies:
// lower wins). Sweeps get one section per input length: best and peak throughput, the
// saturation rate, and the latencies at the compared rate. Errors: fewer than two inputs,
// inputs of different kinds, a file that is neither kind, no common rate.
Result<std::string> CompareMarkdown(const std::vector<CompareInput>& inputs, const CompareOptions& options);

// SVG plots, one line per input: output throughput vs request rate and median TTFT vs request
// rate (per input length for sweeps). Returns (file name, SVG text) pairs, e.g.
// ("throughput_vs_rate_in1024.svg", "<svg ..."). "inf" is drawn at the right end as "burst".
Result<std::vector<std::pair<std::string, std::string>>> ComparePlots(const std::vector<CompareInput>& inputs);

// Reads a JSON file into a CompareInput labelled with its stem; errors name the file.
Result<CompareInput> LoadCompareInput(const std::string& path, const std::string& label);

}  // namespace gk::bench
