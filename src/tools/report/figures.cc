#include "tools/report/figures.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include "tools/plot/svg_plot.h"
#include "tools/report/format.h"

namespace gk::report {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A line chart over training steps; runs without metrics.jsonl (or without the field) add no line.
Figure StepFigure(const std::vector<Run>& runs, const std::string& file, const std::string& title,
                  const std::string& y_label, const std::function<std::optional<double>(const StepPoint&)>& field) {
  plot::LineChart c;
  c.title = title, c.x_label = "step", c.y_label = y_label;
  size_t longest = 0;
  for (const Run& r : runs) {
    if (!r.training) continue;
    plot::PlotSeries s{r.spec.label, {}};
    for (const StepPoint& p : r.training->steps)
      if (const auto v = field(p); v && std::isfinite(*v)) s.points.emplace_back(p.step, *v);
    longest = std::max(longest, s.points.size());
    if (!s.points.empty()) c.series.push_back(std::move(s));
  }
  c.markers = longest <= 60;  // a circle per step hides a long curve
  return {file, title, c.series.empty() ? "" : plot::RenderSvg(c)};
}

Figure RateFigure(const std::vector<Run>& runs, WorkloadKey key, const std::string& what, const std::string& y_label,
                  double ServingPoint::*field) {
  const std::string w = StrCat(key.first, " in / ", key.second, " out");
  plot::LineChart c;
  c.title = StrCat(what, " vs request rate (", w, ")");
  c.x_label = "request rate (req/s, log2)", c.y_label = y_label, c.log2_x = true;
  for (const Run& r : runs) {
    const ServingWorkload* s = FindWorkload(r, key);
    if (!s) continue;
    plot::PlotSeries line{r.spec.label, {}};
    for (const ServingPoint& p : s->points)
      if (std::isfinite(p.*field)) line.points.emplace_back(p.request_rate, p.*field);
    if (!line.points.empty()) c.series.push_back(std::move(line));
  }
  const std::string stem = what == "Output throughput" ? "throughput_vs_rate" : "ttft_vs_rate";
  return {StrCat(stem, "_in", key.first, "_out", key.second, ".svg"), c.title, c.series.empty() ? "" : plot::RenderSvg(c)};
}

// Charts with one bar per category and run need room: 3 px per bar at least.
int BarWidth(size_t categories, size_t series) {
  return std::max<int>(720, static_cast<int>(230 + categories * std::max<size_t>(1, series) * 3));
}

}  // namespace

std::vector<Figure> TrainingFigures(const std::vector<Run>& runs) {
  return {StepFigure(runs, "loss.svg", "Training loss", "loss", [](const StepPoint& p) { return std::optional(p.loss); }),
          StepFigure(runs, "grad_norm.svg", "Gradient norm", "gradient norm (before clipping)",
                     [](const StepPoint& p) { return p.grad_norm; })};
}

std::vector<Figure> ServingFigures(const std::vector<Run>& runs) {
  std::vector<Figure> out;
  for (const WorkloadKey& key : AllWorkloads(runs)) {
    out.push_back(RateFigure(runs, key, "Output throughput", "output tok/s", &ServingPoint::output_throughput));
    out.push_back(RateFigure(runs, key, "Median TTFT", "median TTFT (ms)", &ServingPoint::median_ttft_ms));
  }
  if (out.empty()) {
    out.push_back({"throughput_vs_rate.svg", "Output throughput vs request rate", ""});
    out.push_back({"ttft_vs_rate.svg", "Median TTFT vs request rate", ""});
  }
  return out;
}

std::vector<Figure> EvalFigures(const std::vector<Run>& runs) {
  std::set<std::string> names;
  std::set<double> rates;
  for (const Run& r : runs)
    if (r.eval)
      for (const ProblemRate& p : r.eval->problems) names.insert(p.problem), rates.insert(std::round(p.rate * 1e6) / 1e6);

  plot::GroupedBarChart per;
  per.title = "pass@1 per problem", per.x_label = "problem", per.y_label = "pass@1 (%)";
  per.y_max = 100, per.value_decimals = 0;
  per.categories.assign(names.begin(), names.end());
  plot::GroupedBarChart dist;
  dist.title = "Score distribution", dist.x_label = "problem pass rate", dist.y_label = "problems";
  for (double rate : rates) dist.categories.push_back(Fixed(rate * 100, 0) + " %");
  for (const Run& r : runs) {
    if (!r.eval || r.eval->problems.empty()) continue;
    std::map<std::string, double> by;
    std::vector<double> counts(rates.size(), 0);
    for (const ProblemRate& p : r.eval->problems) {
      by[p.problem] = p.rate * 100;
      counts[std::distance(rates.begin(), rates.find(std::round(p.rate * 1e6) / 1e6))] += 1;
    }
    plot::BarSeries s{r.spec.label, {}};
    for (const std::string& n : per.categories) s.values.push_back(by.count(n) ? by[n] : kNaN);
    per.series.push_back(std::move(s));
    dist.series.push_back({r.spec.label, counts});
  }
  per.width = BarWidth(per.categories.size(), per.series.size());
  return {{"pass_rate_per_problem.svg", per.title, per.series.empty() ? "" : plot::RenderGroupedBarSvg(per)},
          {"score_distribution.svg", dist.title, dist.series.empty() ? "" : plot::RenderGroupedBarSvg(dist)}};
}

std::vector<Figure> AdvantageFigures(const std::vector<Run>& runs, const std::vector<Headline>& headlines) {
  std::vector<Figure> out;
  for (size_t b = 1; b < runs.size(); ++b) {
    plot::BarChart c = AdvantageChart(runs, headlines, b);
    c.width = BarWidth(c.bars.size(), 8);
    out.push_back({runs.size() > 2 ? StrCat("advantage_", b, ".svg") : "advantage.svg", c.title,
                   c.bars.empty() ? "" : plot::RenderBarSvg(c)});
  }
  return out;
}

}  // namespace gk::report
