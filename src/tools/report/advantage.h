// The relative-advantage summary: for each headline metric, run B's value over run A's and
// which of the two is better (throughputs and pass rates: higher; times and costs: lower).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tools/plot/svg_plot.h"
#include "tools/report/measures.h"
#include "tools/report/tables.h"

namespace gk::report {

enum class Unit { kTokPerS, kSeconds, kDollars, kLoss, kPassRate, kMillis };

struct Headline {
  std::string name;
  bool higher_is_better = true;
  Unit unit = Unit::kTokPerS;
  std::vector<std::optional<double>> values;  // one per run
  std::string not_comparable;                 // why a ratio would mislead ("" when it would not)
  std::vector<std::string> missing;           // per run: why a value is absent ("not measured", "no price given")
};

std::vector<Headline> Headlines(const std::vector<Run>& runs, const ReportOptions& options);

// Run b against run 0: metric | A | B | B / A | better.
Table AdvantageTable(const std::vector<Run>& runs, const std::vector<Headline>& headlines, size_t b);

// Bars of B's advantage factor per comparable metric (B/A when higher is better, A/B when lower
// is), so > 1 means B is better; no bars when nothing is comparable.
plot::BarChart AdvantageChart(const std::vector<Run>& runs, const std::vector<Headline>& headlines, size_t b);

std::string FormatValue(Unit unit, double v);

}  // namespace gk::report
