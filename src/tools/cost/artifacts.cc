#include "tools/cost/artifacts.h"

#include <cmath>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "util/atomic_file.h"
#include "util/guarded_parse.h"

namespace gk::cost {
namespace {

using nlohmann::json;

Result<json> ReadJson(const std::string& path) {
  GK_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  GK_ASSIGN_OR_RETURN(json j, ParseJson(text, path));
  if (!j.is_object()) return Status::Error(StrCat(path, ": expected a JSON object"));
  return j;
}

Result<double> Number(const json& j, const std::string& path, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) return Status::Error(StrCat(path, ": missing field '", key, "'"));
  if (!it->is_number()) return Status::Error(StrCat(path, ": field '", key, "' is not a number"));
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < 0) return Status::Error(StrCat(path, ": field '", key, "' must be >= 0, got ", v));
  return v;
}

std::string RateText(const json& r) {
  if (r.is_string()) return r.get<std::string>();
  if (r.is_number()) {
    std::ostringstream os;
    os << r.get<double>();
    return os.str();
  }
  return "?";
}

Result<ServingPoint> ReadPoint(const json& j, const std::string& file, int input_len, int output_len) {
  ServingPoint p;
  p.file = file;
  GK_ASSIGN_OR_RETURN(p.output_throughput, Number(j, file, "output_throughput"));
  if (j.contains("median_ttft_ms") && j["median_ttft_ms"].is_number()) p.median_ttft_ms = j["median_ttft_ms"].get<double>();
  if (j.contains("median_tpot_ms") && j["median_tpot_ms"].is_number()) p.median_tpot_ms = j["median_tpot_ms"].get<double>();
  p.request_rate = j.contains("request_rate") ? RateText(j["request_rate"]) : "?";
  p.input_len = input_len;
  p.output_len = output_len;
  if (p.input_len <= 0 || p.output_len <= 0) {
    // A vLLM result without gemmakit's workload block: the mean lengths of its requests.
    GK_ASSIGN_OR_RETURN(double done, Number(j, file, "completed"));
    GK_ASSIGN_OR_RETURN(double in, Number(j, file, "total_input_tokens"));
    GK_ASSIGN_OR_RETURN(double out, Number(j, file, "total_output_tokens"));
    if (done <= 0) return Status::Error(StrCat(file, ": no completed requests"));
    p.input_len = int(std::lround(in / done));
    p.output_len = int(std::lround(out / done));
  }
  return p;
}

Result<TrainingRunSummary> ReadTrainingRunUnguarded(const std::string& path) {
  GK_ASSIGN_OR_RETURN(json j, ReadJson(path));
  TrainingRunSummary s;
  s.path = path;
  auto with_file = [&](const char* key) { return Number(j, path + " (training_run.json)", key); };
  GK_ASSIGN_OR_RETURN(s.wall_s, with_file("wall_time_s"));
  GK_ASSIGN_OR_RETURN(s.tokens, with_file("tokens"));
  s.elapsed_all_s = s.wall_s;
  if (j.contains("elapsed_s_all_runs") && j["elapsed_s_all_runs"].is_number()) s.elapsed_all_s = j["elapsed_s_all_runs"].get<double>();
  s.tokens_per_s = s.wall_s > 0 ? s.tokens / s.wall_s : 0;
  s.resumed = j.contains("resumed_from") && !j["resumed_from"].is_null();
  if (s.wall_s <= 0) return Status::Error(StrCat(path, ": wall_time_s is 0"));
  return s;
}

Result<std::vector<ServingPoint>> ReadServingResultUnguarded(const std::string& path) {
  GK_ASSIGN_OR_RETURN(json j, ReadJson(path));
  std::vector<ServingPoint> out;
  if (j.contains("gemmakit_sweep")) {
    if (!j.contains("points") || !j["points"].is_array() || j["points"].empty()) {
      return Status::Error(StrCat(path, ": sweep file without 'points'"));
    }
    for (const json& p : j["points"]) {
      if (!p.is_object()) return Status::Error(StrCat(path, ": a sweep point is not an object"));
      GK_ASSIGN_OR_RETURN(ServingPoint sp, ReadPoint(p, path, p.value("input_len", 0), p.value("output_len", 0)));
      out.push_back(sp);
    }
    return out;
  }
  int in = 0, outl = 0;
  if (j.contains("gemmakit") && j["gemmakit"].is_object()) {
    in = j["gemmakit"].value("input_len", 0);
    outl = j["gemmakit"].value("output_len", 0);
  }
  GK_ASSIGN_OR_RETURN(ServingPoint sp, ReadPoint(j, path, in, outl));
  out.push_back(sp);
  return out;
}

}  // namespace

// Run artifacts are outside input: whatever reading them throws (e.g. "input_len": "8", a
// string where value() wants a number) is an error, not an abort (util/guarded_parse.h).
Result<TrainingRunSummary> ReadTrainingRun(const std::string& path) {
  return GuardedParse(path, [&] { return ReadTrainingRunUnguarded(path); });
}

Result<std::vector<ServingPoint>> ReadServingResult(const std::string& path) {
  return GuardedParse(path, [&] { return ReadServingResultUnguarded(path); });
}

std::string ServingWorkload::Label() const { return StrCat(input_len, " in / ", output_len, " out"); }

std::vector<ServingWorkload> BestPerWorkload(const std::vector<ServingPoint>& points) {
  std::map<std::pair<int, int>, ServingWorkload> by;
  for (const ServingPoint& p : points) {
    ServingWorkload& w = by[{p.input_len, p.output_len}];
    w.input_len = p.input_len;
    w.output_len = p.output_len;
    if (w.points++ == 0 || p.output_throughput > w.best.output_throughput) w.best = p;
  }
  std::vector<ServingWorkload> out;
  for (auto& [k, w] : by) out.push_back(w);
  return out;
}

}  // namespace gk::cost
