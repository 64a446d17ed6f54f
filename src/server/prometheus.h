// Prometheus text exposition (format 0.0.4) for GET /metrics: counters, gauges and histograms
// with labels, written the way prometheus_client (vLLM's exporter) writes them:
//   # HELP name help
//   # TYPE name counter|gauge|histogram
//   name{label="value"} 1.0
//   name_bucket{...,le="0.005"} 3.0 ... name_bucket{...,le="+Inf"} 7.0  name_count 7.0  name_sum 0.42
// Histograms are cumulative (each bucket counts observations <= le).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace gk::server {

using Labels = std::vector<std::pair<std::string, std::string>>;

// vLLM's bucket families (vllm/v1/metrics/loggers.py).
const std::vector<double>& TtftBuckets();             // time_to_first_token_seconds: 1 ms .. 2560 s
const std::vector<double>& TokenLatencyBuckets();     // inter_token_latency / time_per_output_token
const std::vector<double>& RequestLatencyBuckets();   // e2e, queue, inference, prefill, decode

// A thread-safe histogram with fixed upper bounds (the +Inf bucket is implicit).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // per bound, then +Inf (size bounds + 1)
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot Get() const;

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative), last = above every bound
  double sum_ = 0;
};

// Builds the exposition text, one metric family at a time.
class PrometheusWriter {
 public:
  // One family with one sample per label set.
  void AddGauge(const std::string& name, const std::string& help,
             const std::vector<std::pair<Labels, double>>& samples);
  // `name` includes the _total suffix, as on the wire.
  void AddCounter(const std::string& name, const std::string& help,
               const std::vector<std::pair<Labels, double>>& samples);
  void AddHistogram(const std::string& name, const std::string& help, const Labels& labels,
                 const Histogram::Snapshot& snapshot);
  const std::string& text() const { return out_; }

 private:
  void Header(const std::string& name, const std::string& help, const char* type);
  void Sample(const std::string& name, const Labels& labels, double value);
  std::string out_;
};

// A value as prometheus_client prints it: 1.0, 0.25, 1e-05, +Inf, NaN.
std::string FormatPromValue(double v);
// A label value with \, " and newline escaped.
std::string EscapeLabelValue(const std::string& v);

}  // namespace gk::server
