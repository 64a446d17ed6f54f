#include "tools/report/measures.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "tools/report/format.h"

namespace gk::report {
namespace {

bool SameRate(double a, double b) {
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::fabs(a - b) <= 1e-9 * std::max(1.0, std::fabs(a));
}

template <class Field>
std::optional<Best> MaxOf(const ServingWorkload& w, Field field) {
  std::optional<Best> best;
  for (const ServingPoint& p : w.points) {
    const double v = field(p);
    if (std::isfinite(v) && (!best || v > best->value)) best = Best{v, p.request_rate};
  }
  return best;
}

}  // namespace

std::optional<cost::TrainingCost> TrainingCostOfRun(const Run& run) {
  if (!run.training || !run.spec.training_price_per_hour) return std::nullopt;
  return cost::TrainingCostOf(run.training->wall_time_s / 3600.0, run.training->tokens, *run.spec.training_price_per_hour);
}

std::optional<double> TimePerSample(const Run& run) {
  if (!run.training || !run.training->samples || *run.training->samples <= 0) return std::nullopt;
  return run.training->wall_time_s / static_cast<double>(*run.training->samples);
}

std::vector<WorkloadKey> AllWorkloads(const std::vector<Run>& runs) {
  std::set<WorkloadKey> keys;
  for (const Run& r : runs)
    for (const ServingWorkload& w : r.serving) keys.insert({w.input_len, w.output_len});
  return {keys.begin(), keys.end()};
}

const ServingWorkload* FindWorkload(const Run& run, WorkloadKey key) {
  for (const ServingWorkload& w : run.serving)
    if (w.input_len == key.first && w.output_len == key.second) return &w;
  return nullptr;
}

std::optional<Best> PeakOutput(const ServingWorkload& w) {
  return MaxOf(w, [](const ServingPoint& p) { return p.peak_output_tok_s; });
}

std::optional<Best> BestOutput(const ServingWorkload& w) {
  return MaxOf(w, [](const ServingPoint& p) { return p.output_throughput; });
}

const ServingPoint* PointAt(const ServingWorkload& w, double request_rate) {
  for (const ServingPoint& p : w.points)
    if (SameRate(p.request_rate, request_rate)) return &p;
  return nullptr;
}

std::optional<double> LatencyRate(const std::vector<Run>& runs, WorkloadKey key, const ReportOptions& options) {
  if (options.at_rate) return options.at_rate;
  std::optional<std::vector<double>> shared;
  for (const Run& r : runs) {
    const ServingWorkload* w = FindWorkload(r, key);
    if (!w) continue;
    std::vector<double> rates;
    for (const ServingPoint& p : w->points)
      if (!shared || std::any_of(shared->begin(), shared->end(), [&](double s) { return SameRate(s, p.request_rate); }))
        rates.push_back(p.request_rate);
    shared = std::move(rates);
  }
  if (!shared || shared->empty()) return std::nullopt;
  return *std::min_element(shared->begin(), shared->end());
}

std::optional<cost::ServingCost> ServingCostOfRun(const Run& run, WorkloadKey key, ServingBasis basis) {
  const ServingWorkload* w = FindWorkload(run, key);
  if (!w || !run.spec.serving_price_per_hour) return std::nullopt;
  const std::optional<Best> b = basis == ServingBasis::kPeak ? PeakOutput(*w) : BestOutput(*w);
  if (!b || b->value <= 0) return std::nullopt;
  return cost::ServingCostOf(StrCat(key.first, " in / ", key.second, " out"), b->value, *run.spec.serving_price_per_hour);
}

std::optional<double> TcoOf(const Run& run, double serving_hours) {
  const std::optional<cost::TrainingCost> t = TrainingCostOfRun(run);
  if (!t || !run.spec.serving_price_per_hour) return std::nullopt;
  return cost::TcoRows(t->cost, *run.spec.serving_price_per_hour, {serving_hours}).at(0).cost;
}

}  // namespace gk::report
