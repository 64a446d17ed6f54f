#include "tools/bench_serve/result_report.h"

#include <cmath>
#include <cstdio>

namespace gk::bench {

namespace {

std::string Row(const std::string& name, double v) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%-40s %-10.2f\n", name.c_str(), v);
  return buf;
}

std::string RowInt(const std::string& name, long long v) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%-40s %-10lld\n", name.c_str(), v);
  return buf;
}

// Python's "{s:{c}^{n}}".format(s=title, n=50, c=fill): centred, the extra fill on the right.
std::string Centered(const std::string& title, char fill) {
  const int n = 50, len = static_cast<int>(title.size());
  if (len >= n) return title + "\n";
  const int left = (n - len) / 2;
  return std::string(left, fill) + title + std::string(n - len - left, fill) + "\n";
}

// vLLM's percentile word: "99" for integral p, else Python's str(p) ("99.9").
std::string PercentileWord(double p) {
  char buf[32];
  if (p == std::floor(p)) std::snprintf(buf, sizeof(buf), "%d", static_cast<int>(p));
  else std::snprintf(buf, sizeof(buf), "%.15g", p);
  return buf;
}

bool Selected(const PointSetup& s, const std::string& metric) {
  for (const auto& m : s.percentile_metrics) {
    if (m == metric) return true;
  }
  return false;
}

struct MetricSection {
  const char* key;
  const char* name;
  const char* header;
  MetricStats stats;
};

// The optional sections after the four standard ones (only with --max-concurrency).
std::vector<MetricSection> Sections(const BenchMetrics& m, const RunResult& run, const PointSetup& s) {
  std::vector<MetricSection> out = {
      {"ttft", "TTFT", "Time to First Token", m.ttft},
      {"tpot", "TPOT", "Time per Output Token (excl. 1st token)", m.tpot},
      {"itl", "ITL", "Inter-token Latency", m.itl},
      {"e2el", "E2EL", "End-to-end Latency", m.e2el},
  };
  if (s.max_concurrency > 0) {
    std::vector<double> queue, e2el_queue;
    for (const auto& o : run.outcomes) {
      if (!o.success) continue;
      queue.push_back(o.queue_time);
      e2el_queue.push_back(o.latency + o.queue_time);
    }
    out.push_back({"client_queue_time", "Client Queue Time", "Client-side Queueing", ComputeStats(queue, s.percentiles)});
    if (!std::isinf(s.request_rate)) {
      out.push_back({"e2el_including_client_queue", "E2EL incl. Client Queue", "Queue-inclusive End-to-end Latency",
                     ComputeStats(e2el_queue, s.percentiles)});
    }
  }
  return out;
}

}  // namespace

std::string RateText(double rate) {
  if (std::isinf(rate)) return "inf";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.15g", rate);
  std::string t = buf;
  if (t.find_first_of(".e") == std::string::npos) t += ".0";  // Python prints floats with a point
  return t;
}

std::string FormatSummary(const BenchMetrics& m, const RunResult& run, const PointSetup& s) {
  std::string out = Centered(" Serving Benchmark Result ", '=');
  out += RowInt("Successful requests:", m.completed);
  out += RowInt("Failed requests:", m.failed);
  if (s.max_concurrency > 0) out += RowInt("Maximum request concurrency:", s.max_concurrency);
  if (!std::isinf(s.request_rate)) out += Row("Request rate configured (RPS):", s.request_rate);
  out += Row("Benchmark duration (s):", run.duration_s);
  out += RowInt("Total input tokens:", m.total_input);
  out += RowInt("Total generated tokens:", m.total_output);
  out += Row("Request throughput (req/s):", m.request_throughput);
  if (s.goodput.any()) out += Row("Request goodput (req/s):", m.request_goodput);
  out += Row("Output token throughput (tok/s):", m.output_throughput);
  out += Row("Peak output token throughput (tok/s):", m.max_output_tokens_per_s);
  out += Row("Peak concurrent requests:", m.max_concurrent_requests);
  out += Row("Total token throughput (tok/s):", m.total_token_throughput);
  for (const MetricSection& sec : Sections(m, run, s)) {
    if (!Selected(s, sec.key)) continue;
    out += Centered(sec.header, '-');
    out += Row(StrCat("Mean ", sec.name, " (ms):"), sec.stats.mean_ms);
    out += Row(StrCat("Median ", sec.name, " (ms):"), sec.stats.median_ms);
    for (const auto& [p, v] : sec.stats.percentiles_ms) out += Row(StrCat("P", PercentileWord(p), " ", sec.name, " (ms):"), v);
  }
  out += std::string(50, '=') + "\n";
  return out;
}

std::string FormatClientOverhead(const RunResult& run) {
  const double per_msg_us = run.sse_messages ? run.client_cpu_s / static_cast<double>(run.sse_messages) * 1e6 : 0;
  const double load = run.duration_s > 0 ? run.client_cpu_s / run.duration_s * 100 : 0;
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "Client overhead: %.2f us CPU per SSE message (%lld messages), %.1f%% of one core, "
                "peak %d open connections\n",
                per_msg_us, run.sse_messages, load, run.peak_open_connections);
  return buf;
}

nlohmann::ordered_json ResultJson(const BenchMetrics& m, const RunResult& run, const PointSetup& s) {
  nlohmann::ordered_json j;
  j["date"] = s.date;
  j["endpoint_type"] = s.endpoint_type;
  j["backend"] = s.endpoint_type;
  j["label"] = s.label.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(s.label);
  j["model_id"] = s.model_id;
  j["tokenizer_id"] = s.tokenizer_id;
  j["num_prompts"] = s.num_prompts;
  for (const auto& [k, v] : s.metadata) j[k] = v;
  if (std::isinf(s.request_rate)) j["request_rate"] = "inf";
  else j["request_rate"] = s.request_rate;
  j["burstiness"] = s.burstiness;
  j["max_concurrency"] = s.max_concurrency > 0 ? nlohmann::ordered_json(s.max_concurrency) : nlohmann::ordered_json();
  j["duration"] = run.duration_s;
  j["completed"] = m.completed;
  j["failed"] = m.failed;
  j["total_input_tokens"] = m.total_input;
  j["total_output_tokens"] = m.total_output;
  j["request_throughput"] = m.request_throughput;
  j["request_goodput"] = s.goodput.any() ? nlohmann::ordered_json(m.request_goodput) : nlohmann::ordered_json();
  j["output_throughput"] = m.output_throughput;
  j["total_token_throughput"] = m.total_token_throughput;
  nlohmann::ordered_json latencies = nlohmann::ordered_json::array(), queue = nlohmann::ordered_json::array();
  for (const auto& o : run.outcomes) {
    latencies.push_back(o.latency);
    queue.push_back(o.queue_time);
  }
  if (s.save_detailed) {
    nlohmann::ordered_json input_lens = nlohmann::ordered_json::array(), ttfts = nlohmann::ordered_json::array(),
                           itls = nlohmann::ordered_json::array(), starts = nlohmann::ordered_json::array(),
                           texts = nlohmann::ordered_json::array(), errors = nlohmann::ordered_json::array();
    for (const auto& o : run.outcomes) {
      input_lens.push_back(o.prompt_len);
      ttfts.push_back(o.ttft);
      itls.push_back(o.itl);
      starts.push_back(o.start_time);
      texts.push_back(o.generated_text);
      errors.push_back(o.error);
    }
    j["input_lens"] = input_lens;
    j["output_lens"] = m.actual_output_lens;
    j["ttfts"] = ttfts;
    j["itls"] = itls;
    j["latencies"] = latencies;
    j["start_times"] = starts;
    j["queue_times"] = queue;
    j["generated_texts"] = texts;
    j["errors"] = errors;
  } else {
    j["latencies"] = latencies;
    j["queue_times"] = queue;
  }
  j["max_output_tokens_per_s"] = m.max_output_tokens_per_s;
  j["max_concurrent_requests"] = m.max_concurrent_requests;
  j["rtfx"] = 0.0;
  for (const MetricSection& sec : Sections(m, run, s)) {
    if (!Selected(s, sec.key)) continue;
    j[StrCat("mean_", sec.key, "_ms")] = sec.stats.mean_ms;
    j[StrCat("median_", sec.key, "_ms")] = sec.stats.median_ms;
    j[StrCat("std_", sec.key, "_ms")] = sec.stats.std_ms;
    for (const auto& [p, v] : sec.stats.percentiles_ms) j[StrCat("p", PercentileWord(p), "_", sec.key, "_ms")] = v;
  }
  nlohmann::ordered_json g = s.gemmakit;
  g["client"] = {{"cpu_s", run.client_cpu_s},
                 {"sse_messages", run.sse_messages},
                 {"cpu_per_sse_message_us",
                  run.sse_messages ? run.client_cpu_s / static_cast<double>(run.sse_messages) * 1e6 : 0.0},
                 {"core_load", run.duration_s > 0 ? run.client_cpu_s / run.duration_s : 0.0},
                 {"peak_open_connections", run.peak_open_connections}};
  j["gemmakit"] = g;
  return j;
}

std::string ResultFileName(const PointSetup& s) {
  std::string base = s.model_id;
  if (const size_t slash = base.rfind('/'); slash != std::string::npos) base = base.substr(slash + 1);
  const std::string label = s.label.empty() ? s.endpoint_type : s.label;
  const std::string conc = s.max_concurrency > 0 ? StrCat("-concurrency", s.max_concurrency) : "";
  return StrCat(label, "-", RateText(s.request_rate), "qps", conc, "-", base, "-", s.date, ".json");
}

}  // namespace gk::bench
