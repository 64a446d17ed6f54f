#include "tools/bench_serve/sweep.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "tools/bench_serve/result_report.h"
#include "util/result.h"

namespace gk::bench {

namespace {

double Num(const nlohmann::ordered_json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : 0.0;
}

nlohmann::ordered_json RateJson(double rate) {
  return std::isinf(rate) ? nlohmann::ordered_json("inf") : nlohmann::ordered_json(rate);
}

}  // namespace

std::vector<SweepSummary> SummarizeSweep(const std::vector<SweepPoint>& points) {
  std::vector<int> lens;
  for (const auto& p : points) {
    if (std::find(lens.begin(), lens.end(), p.input_len) == lens.end()) lens.push_back(p.input_len);
  }
  std::vector<SweepSummary> out;
  for (int len : lens) {
    std::vector<const SweepPoint*> ps;
    for (const auto& p : points) {
      if (p.input_len == len) ps.push_back(&p);
    }
    std::stable_sort(ps.begin(), ps.end(), [](auto* a, auto* b) { return a->request_rate < b->request_rate; });
    SweepSummary s;
    s.input_len = len;
    for (const SweepPoint* p : ps) {
      const double tp = Num(p->result, "output_throughput");
      if (tp > s.best_output_throughput) {
        s.best_output_throughput = tp;
        s.best_rate = p->request_rate;
      }
      s.peak_output_tokens_per_s = std::max(s.peak_output_tokens_per_s, Num(p->result, "max_output_tokens_per_s"));
    }
    for (size_t i = 0; i + 1 < ps.size(); ++i) {
      const double now = Num(ps[i]->result, "output_throughput"), next = Num(ps[i + 1]->result, "output_throughput");
      if (next < now * (1 + kSaturationGrowth)) {
        s.saturation_rate = ps[i]->request_rate;
        s.ttft_at_saturation_ms = Num(ps[i]->result, "median_ttft_ms");
        s.ttft_after_saturation_ms = Num(ps[i + 1]->result, "median_ttft_ms");
        break;
      }
    }
    out.push_back(s);
  }
  return out;
}

nlohmann::ordered_json SweepJson(const std::vector<SweepPoint>& points, const nlohmann::ordered_json& setup) {
  nlohmann::ordered_json j;
  j["gemmakit_sweep"] = 1;
  for (const auto& [k, v] : setup.items()) j[k] = v;
  nlohmann::ordered_json ps = nlohmann::ordered_json::array();
  for (const auto& p : points) {
    nlohmann::ordered_json e;
    e["input_len"] = p.input_len;
    e["output_len"] = p.output_len;
    e["request_rate"] = RateJson(p.request_rate);
    e["result_file"] = p.result_file;
    for (const auto& [k, v] : p.result.items()) {
      if (!v.is_array() && !v.is_object() && !e.contains(k)) e[k] = v;
    }
    ps.push_back(e);
  }
  j["points"] = ps;
  nlohmann::ordered_json ss = nlohmann::ordered_json::array();
  for (const auto& s : SummarizeSweep(points)) {
    ss.push_back({{"input_len", s.input_len},
                  {"saturation_request_rate", s.saturation_rate ? RateJson(*s.saturation_rate) : nlohmann::ordered_json()},
                  {"median_ttft_ms_at_saturation", s.ttft_at_saturation_ms},
                  {"median_ttft_ms_after_saturation", s.ttft_after_saturation_ms},
                  {"best_output_throughput", s.best_output_throughput},
                  {"best_output_throughput_request_rate", RateJson(s.best_rate)},
                  {"peak_output_tokens_per_s", s.peak_output_tokens_per_s}});
  }
  j["summary"] = ss;
  return j;
}

std::string FormatSweep(const std::vector<SweepPoint>& points) {
  std::string out = "================= Sweep Summary ==================\n";
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%8s %6s %8s %10s %10s %10s %10s %10s %6s\n", "input", "output", "rate", "out tok/s",
                "peak tok/s", "med TTFT", "med TPOT", "P99 ITL", "failed");
  out += buf;
  for (const auto& p : points) {
    std::snprintf(buf, sizeof(buf), "%8d %6d %8s %10.2f %10.2f %10.2f %10.2f %10.2f %6d\n", p.input_len, p.output_len,
                  RateText(p.request_rate).c_str(), Num(p.result, "output_throughput"),
                  Num(p.result, "max_output_tokens_per_s"), Num(p.result, "median_ttft_ms"),
                  Num(p.result, "median_tpot_ms"), Num(p.result, "p99_itl_ms"),
                  static_cast<int>(Num(p.result, "failed")));
    out += buf;
  }
  for (const auto& s : SummarizeSweep(points)) {
    std::string sat = "saturation not reached (throughput still grows at the highest rate)";
    if (s.saturation_rate) {
      std::snprintf(buf, sizeof(buf), "saturates at %s req/s (median TTFT %.2f ms there, %.2f ms at the next rate)",
                    RateText(*s.saturation_rate).c_str(), s.ttft_at_saturation_ms, s.ttft_after_saturation_ms);
      sat = buf;
    }
    std::snprintf(buf, sizeof(buf), "input %d: best sustained %.2f tok/s at %s req/s; peak %.2f tok/s; %s\n",
                  s.input_len, s.best_output_throughput, RateText(s.best_rate).c_str(), s.peak_output_tokens_per_s,
                  sat.c_str());
    out += buf;
  }
  out += std::string(50, '=') + "\n";
  return out;
}

}  // namespace gk::bench
