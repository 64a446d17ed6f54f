// The artifacts of one RUN_DIR, found by their files anywhere below it (docs/REPORT.md):
//  - training: training_run.json (`gemmakit train`) and metrics.jsonl beside it;
//  - eval: summary.json with "pass_at_k" (`gemmakit eval verilog`);
//  - serving: sweep-*.json ("gemmakit_sweep": 1) and point results *qps*.json
//    (`gemmakit bench serve` / `vllm bench serve --save-result`).
// Each part is optional; a report shows "not measured" where one is missing.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tools/report/run_spec.h"
#include "util/result.h"

namespace gk::report {

struct StepPoint {
  double step = 0, loss = 0;
  std::optional<double> grad_norm;
};

struct TrainingArtifact {
  std::string file;                   // training_run.json
  double wall_time_s = 0;             // this invocation (a resumed run bills its own hours)
  double tokens = 0;                  // tokens of this invocation's steps
  double tokens_per_s = 0;
  std::optional<double> final_loss;   // null when no step ran
  std::optional<int64_t> samples;     // steps done this invocation × micro_batch × grad_accum
  std::string loss_kind;              // "assistant" or "all" (config.data.loss), "" unknown
  // The recipe's shape, for the roofline projection (config.*; unset when absent).
  std::string model_dir;              // config.model
  std::optional<int64_t> max_seq_len, micro_batch, lora_rank;
  bool remat = false;
  std::vector<StepPoint> steps;       // metrics.jsonl; empty when that file is missing
};

struct ProblemRate {
  std::string problem;
  int64_t n = 0, c = 0;
  double rate = 0;  // c / n = the problem's pass@1
};

struct EvalArtifact {
  std::string file;                 // summary.json
  std::map<int, double> pass_at_k;  // k -> unbiased pass@k
  int64_t problem_count = 0, all_pass = 0, none_pass = 0;
  std::vector<ProblemRate> problems;
};

// One request rate of a serving benchmark (vLLM's field names; ms latencies). A metric the
// result file lacks (older vLLM has no max_output_tokens_per_s) is NaN.
struct ServingPoint {
  double request_rate = 0;  // +inf = burst
  double output_throughput = 0, peak_output_tok_s = 0;
  double median_ttft_ms = 0, median_tpot_ms = 0, p99_itl_ms = 0;
  std::string date;   // YYYYMMDD-HHMMSS: the newest result at a rate wins
  std::string file;
};

// All rates measured for one (input, output) length pair, sorted by rate.
struct ServingWorkload {
  int64_t input_len = 0, output_len = 0;
  std::vector<ServingPoint> points;
};

struct Run {
  RunSpec spec;
  std::optional<TrainingArtifact> training;
  std::optional<EvalArtifact> eval;
  std::vector<ServingWorkload> serving;  // sorted by (input_len, output_len)
  bool empty() const { return !training && !eval && serving.empty(); }
};

// Finds and reads the artifacts below spec.dir. Errors: the directory is missing, a found file
// is malformed or lacks a required field (the message names the file and the field), two
// training runs or two evals in one RUN_DIR (give each run its own directory).
Result<Run> LoadRun(const RunSpec& spec);

// The serving part alone, from already-found files (sweep summaries and point results).
Result<std::vector<ServingWorkload>> LoadServing(const std::vector<std::string>& sweep_files,
                                                 const std::vector<std::string>& point_files);

// "64 in / 16 out": a workload's name in tables and figure titles.
std::string WorkloadName(const ServingWorkload& w);

}  // namespace gk::report
