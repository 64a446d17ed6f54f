// The serving part of a RUN_DIR: sweep summaries and point results merged into workloads.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <set>

#include "tools/report/artifacts.h"
#include "tools/report/json_fields.h"

namespace gk::report {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

Result<double> Rate(const json& j, const std::string& file) {
  if (!j.contains("request_rate")) return Result<double>::Error(StrCat(file, ": field \"request_rate\" is missing"));
  const json& v = j["request_rate"];
  if (v.is_number()) return v.get<double>();
  if (v.is_string() && (v == "inf" || v == "Infinity")) return std::numeric_limits<double>::infinity();
  return Result<double>::Error(StrCat(file, ": \"request_rate\" must be a number or \"inf\", got ", v.dump()));
}

Result<double> Metric(const json& j, const std::string& key, const std::string& file) {
  GK_ASSIGN_OR_RETURN(const std::optional<double> v, OptionalNumber(j, key, file));
  return v.value_or(kNaN);
}

// The metrics of one rate: the point's scalar fields (vLLM's names).
Result<ServingPoint> PointOf(const json& j, const std::string& file) {
  ServingPoint p;
  p.file = file;
  GK_ASSIGN_OR_RETURN(p.request_rate, Rate(j, file));
  GK_ASSIGN_OR_RETURN(p.output_throughput, NumberField(j, "output_throughput", file));
  GK_ASSIGN_OR_RETURN(p.peak_output_tok_s, Metric(j, "max_output_tokens_per_s", file));
  GK_ASSIGN_OR_RETURN(p.median_ttft_ms, Metric(j, "median_ttft_ms", file));
  GK_ASSIGN_OR_RETURN(p.median_tpot_ms, Metric(j, "median_tpot_ms", file));
  GK_ASSIGN_OR_RETURN(p.p99_itl_ms, Metric(j, "p99_itl_ms", file));
  if (j.contains("date") && j["date"].is_string()) p.date = j["date"].get<std::string>();
  return p;
}

using Key = std::pair<int64_t, int64_t>;  // (input_len, output_len)

// Same rate, newest result wins: reruns into one result directory leave older files behind.
void Add(std::map<Key, std::vector<ServingPoint>>& by, Key key, ServingPoint p) {
  std::vector<ServingPoint>& pts = by[key];
  for (ServingPoint& q : pts) {
    const bool same = std::isinf(q.request_rate) || std::isinf(p.request_rate)
                          ? q.request_rate == p.request_rate
                          : std::fabs(q.request_rate - p.request_rate) <= 1e-9 * std::max(1.0, q.request_rate);
    if (!same) continue;
    if (p.date >= q.date) q = std::move(p);
    return;
  }
  pts.push_back(std::move(p));
}

Result<int64_t> Length(const json& j, const std::string& key, const std::string& file) {
  GK_ASSIGN_OR_RETURN(const double v, NumberField(j, key, file));
  return static_cast<int64_t>(std::llround(v));
}

// A point file's lengths: gemmakit records them; for vLLM's files, tokens per completed request.
Result<Key> PointLengths(const json& j, const std::string& file) {
  if (j.contains("gemmakit") && j["gemmakit"].is_object() && j["gemmakit"].contains("input_len")) {
    GK_ASSIGN_OR_RETURN(const int64_t in, Length(j["gemmakit"], "input_len", file));
    GK_ASSIGN_OR_RETURN(const int64_t out, Length(j["gemmakit"], "output_len", file));
    return Key{in, out};
  }
  GK_ASSIGN_OR_RETURN(const double completed, NumberField(j, "completed", file));
  GK_ASSIGN_OR_RETURN(const double in, NumberField(j, "total_input_tokens", file));
  GK_ASSIGN_OR_RETURN(const double out, NumberField(j, "total_output_tokens", file));
  if (completed <= 0) return Result<Key>::Error(StrCat(file, ": no completed requests, so no lengths to group by"));
  return Key{std::llround(in / completed), std::llround(out / completed)};
}

}  // namespace

Result<std::vector<ServingWorkload>> LoadServing(const std::vector<std::string>& sweep_files,
                                                 const std::vector<std::string>& point_files) {
  std::map<Key, std::vector<ServingPoint>> by;
  std::set<std::string> covered;  // point files a sweep already summarised (by file name)
  for (const std::string& file : sweep_files) {
    GK_ASSIGN_OR_RETURN(const json doc, ReadJsonFile(file));
    if (!doc.is_object() || doc.value("gemmakit_sweep", json()) != 1 || !doc.contains("points") ||
        !doc["points"].is_array()) {
      return Result<std::vector<ServingWorkload>>::Error(
          StrCat(file, ": not a bench serve sweep summary (needs \"gemmakit_sweep\": 1 and a \"points\" array)"));
    }
    for (const json& pt : doc["points"]) {
      const std::string where = StrCat(file, " point ", pt.value("result_file", std::string("?")));
      GK_ASSIGN_OR_RETURN(ServingPoint p, PointOf(pt, where));
      if (p.date.empty() && doc.contains("date") && doc["date"].is_string()) p.date = doc["date"].get<std::string>();
      GK_ASSIGN_OR_RETURN(const int64_t in, Length(pt, "input_len", where));
      GK_ASSIGN_OR_RETURN(const int64_t out, Length(pt, "output_len", where));
      if (pt.contains("result_file") && pt["result_file"].is_string()) {
        covered.insert(fs::path(pt["result_file"].get<std::string>()).filename().string());
      }
      Add(by, {in, out}, std::move(p));
    }
  }
  for (const std::string& file : point_files) {
    if (covered.count(fs::path(file).filename().string())) continue;
    GK_ASSIGN_OR_RETURN(const json doc, ReadJsonFile(file));
    if (!doc.is_object() || !doc.contains("request_rate") || !doc.contains("output_throughput")) {
      return Result<std::vector<ServingWorkload>>::Error(
          StrCat(file, ": not a bench serve result (needs \"request_rate\" and \"output_throughput\")"));
    }
    GK_ASSIGN_OR_RETURN(ServingPoint p, PointOf(doc, file));
    GK_ASSIGN_OR_RETURN(const Key key, PointLengths(doc, file));
    Add(by, key, std::move(p));
  }
  std::vector<ServingWorkload> out;
  for (auto& [key, pts] : by) {
    std::sort(pts.begin(), pts.end(), [](const ServingPoint& a, const ServingPoint& b) { return a.request_rate < b.request_rate; });
    out.push_back({key.first, key.second, std::move(pts)});
  }
  return out;
}

}  // namespace gk::report
