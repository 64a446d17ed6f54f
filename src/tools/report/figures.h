// The report's charts, drawn with tools/plot: one line or bar per run.
#pragma once

#include <string>
#include <vector>

#include "tools/report/advantage.h"
#include "tools/report/artifacts.h"
#include "tools/report/measures.h"

namespace gk::report {

struct Figure {
  std::string file;   // the SVG's name beside report.md, e.g. "loss.svg"
  std::string title;
  std::string svg;    // "" when no run has the data: the page says "not measured" instead
};

std::vector<Figure> TrainingFigures(const std::vector<Run>& runs);  // loss, gradient norm per step
std::vector<Figure> ServingFigures(const std::vector<Run>& runs);   // per workload: throughput, TTFT vs rate
std::vector<Figure> EvalFigures(const std::vector<Run>& runs);      // pass@1 per problem, score distribution
// One per run after the first: its advantage factors over the first run.
std::vector<Figure> AdvantageFigures(const std::vector<Run>& runs, const std::vector<Headline>& headlines);

}  // namespace gk::report
