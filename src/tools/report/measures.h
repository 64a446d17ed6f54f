// The headline numbers of a run, derived from its artifacts and prices: shared by the tables,
// the figures and the relative-advantage summary so that each number is computed once.
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "tools/cost/cost_model.h"
#include "tools/report/artifacts.h"

namespace gk::report {

struct ReportOptions {
  std::optional<double> at_rate;                // latencies compared here; unset: lowest shared rate
  std::vector<double> tco_hours = {1, 8, 24};   // serving hours added to training in the TCO table
};

using WorkloadKey = std::pair<int64_t, int64_t>;  // (input_len, output_len)

// Training: hours × the training price; nothing without a training run or a price.
std::optional<cost::TrainingCost> TrainingCostOfRun(const Run& run);
// Wall-clock seconds per training sample (row), when the step count and batch are known.
std::optional<double> TimePerSample(const Run& run);

// Every workload any run measured, sorted.
std::vector<WorkloadKey> AllWorkloads(const std::vector<Run>& runs);
const ServingWorkload* FindWorkload(const Run& run, WorkloadKey key);
// The highest finite value of a field over the sweep, with the rate where it was reached.
struct Best {
  double value = 0, request_rate = 0;
};
std::optional<Best> PeakOutput(const ServingWorkload& w);  // max_output_tokens_per_s
std::optional<Best> BestOutput(const ServingWorkload& w);  // output_throughput
const ServingPoint* PointAt(const ServingWorkload& w, double request_rate);
// The rate at which a workload's latencies are compared: options.at_rate, else the lowest rate
// that every run measuring the workload has; nothing when they share none.
std::optional<double> LatencyRate(const std::vector<Run>& runs, WorkloadKey key, const ReportOptions& options);

// Serving $ per 1M output tokens at the serving price: from the peak output tok/s over the sweep
// (the reference case's basis) or the best sustained output throughput.
enum class ServingBasis { kPeak, kSustained };
std::optional<cost::ServingCost> ServingCostOfRun(const Run& run, WorkloadKey key, ServingBasis basis);

// Training cost + hours × serving price; nothing when either is missing.
std::optional<double> TcoOf(const Run& run, double serving_hours);

}  // namespace gk::report
