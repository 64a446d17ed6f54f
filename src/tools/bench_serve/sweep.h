// A sweep: one benchmark point per (input length, request rate), and its summary as the
// reference case reports it (shared/paper/FACTS.md §5):
//  - best sustained throughput: the highest output_throughput of any point;
//  - peak output throughput: the highest max_output_tokens_per_s (busiest second) of any point;
//  - saturation point: walking the finite rates upwards (then the burst), the first rate whose
//    next point adds less than 10% output throughput: past it, more offered load buys no more
//    tokens/s, only queueing. The median TTFT there and at the next rate are reported beside it
//    (how far TTFT climbs). Unset ("not reached") when throughput still grows at the last rate.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gk::bench {

struct SweepPoint {
  int input_len = 0, output_len = 0;
  double request_rate = 0;        // may be inf
  std::string result_file;        // "" when not saved
  nlohmann::ordered_json result;  // ResultJson of the point
};

struct SweepSummary {
  int input_len = 0;
  std::optional<double> saturation_rate;
  double ttft_at_saturation_ms = 0, ttft_after_saturation_ms = 0;
  double best_output_throughput = 0, best_rate = 0;
  double peak_output_tokens_per_s = 0;
};

// Growth below this fraction between consecutive rates counts as saturated.
inline constexpr double kSaturationGrowth = 0.10;

// One summary per input length, in the order the lengths first appear.
std::vector<SweepSummary> SummarizeSweep(const std::vector<SweepPoint>& points);
// {"gemmakit_sweep": 1, setup..., "points": [...scalars of each point...], "summary": [...]}
nlohmann::ordered_json SweepJson(const std::vector<SweepPoint>& points, const nlohmann::ordered_json& setup);
// A console table: one row per point, then the summary lines.
std::string FormatSweep(const std::vector<SweepPoint>& points);

}  // namespace gk::bench
