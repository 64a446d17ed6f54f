// `gemmakit eval verilog`: generate n samples per verilog-eval problem (or take given
// candidates), extract the code, score every sample with iverilog in parallel sandboxed
// workers, and write the results: generations.jsonl (usable again as --candidates),
// samples.jsonl, summary.json, SVG plots.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/eval/eval_report.h"
#include "tools/eval/sample_generator.h"
#include "tools/eval/verilog_scorer.h"

namespace gk::eval {

struct VerilogEvalOptions {
  std::string dataset;                 // a verilog-eval checkout or its dataset_spec-to-rtl directory
  std::vector<std::string> problems;   // names or ProbNNN prefixes; empty: all
  int n_samples = 5;
  GenerationSettings generation;
  uint64_t seed = 0;                   // sample j of problem i uses seed + i * n_samples + j
  std::vector<int> ks = {1, 5};
  int workers = 0;                     // scoring processes at once; 0: the machine's cores
  ScoreOptions score;
  std::string out_dir;                 // "" writes nothing
  std::string candidates;              // JSONL {problem, sample, code}: score these, generate nothing
  nlohmann::ordered_json metadata = nlohmann::ordered_json::object();  // recorded in summary.json
  std::function<void(const std::string& phase, int done, int total)> progress;
};

struct VerilogEvalResult {
  EvalSummary summary;
  std::vector<SampleRecord> records;
  std::string iverilog_version;
  double generation_seconds = 0, scoring_seconds = 0;
  std::vector<std::string> files_written;
};

// generate may be empty when options.candidates is set.
Result<VerilogEvalResult> RunVerilogEval(const VerilogEvalOptions& options, const GenerateFn& generate);

}  // namespace gk::eval
