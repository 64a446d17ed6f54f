// Results of `gemmakit eval verilog`: per-sample records, per-problem pass rates, pass@k
// (the mean over problems of each problem's unbiased pass@k), the score distribution as the
// reference case reports it (problems at 100 % and at 0 %), failure categories, plots, and the
// side-by-side comparison of two runs (`gemmakit eval compare A B`).
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/result.h"

namespace gk::eval {

struct SampleRecord {
  std::string problem;   // "Prob001_zero"
  int sample = 0;
  bool passed = false;
  std::string category;  // CategoryName(...)
  std::string code;      // the extracted candidate
  std::string log;       // excerpt
};

struct ProblemResult {
  std::string problem;
  int n = 0, c = 0;      // samples, passes
  double rate = 0;       // c / n
};

struct EvalSummary {
  std::vector<ProblemResult> problems;        // sorted by name
  std::vector<std::pair<int, double>> pass_at_k;  // (k, mean pass@k), every asked k <= min n
  int problems_all_pass = 0, problems_none_pass = 0;
  std::map<std::string, int> categories;      // category -> samples
  int samples = 0;
};

// ks: the asked k values; those above a problem's n are dropped (reported only for k <= n).
EvalSummary Summarize(const std::vector<SampleRecord>& records, const std::vector<int>& ks);
// {"pass_at_k": {"1": 0.64, "5": 0.79}, "problems_all_pass", "problems_none_pass",
//  "categories", "problems": [{problem, n, c, rate}...], <metadata keys>}
nlohmann::ordered_json SummaryJson(const EvalSummary& s, const nlohmann::ordered_json& metadata);
// A console block: pass@k lines, the distribution, the categories.
std::string FormatEvalSummary(const EvalSummary& s);
// SVGs: ("pass_rate_per_problem.svg", ...) bars of each problem's pass rate, and
// ("score_distribution.svg", ...) the number of problems per pass-rate bucket (0, 1..n passes).
std::vector<std::pair<std::string, std::string>> EvalPlots(const EvalSummary& s);
// Markdown: pass@k rows, problems at 100 % / 0 %, and the problems where the two runs differ
// most; inputs are SummaryJson documents (summary.json of two --out directories).
Result<std::string> CompareEvalMarkdown(const nlohmann::json& a, const nlohmann::json& b, const std::string& label_a,
                                        const std::string& label_b);

}  // namespace gk::eval
