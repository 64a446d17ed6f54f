#include "server/prometheus.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace gk::server {

const std::vector<double>& TtftBuckets() {
  static const std::vector<double> b = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,  0.75,
                                        1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
  return b;
}

const std::vector<double>& TokenLatencyBuckets() {
  static const std::vector<double> b = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                        0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
  return b;
}

const std::vector<double>& RequestLatencyBuckets() {
  static const std::vector<double> b = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
                                        30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
  return b;
}

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::Observe(double value) {
  size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[i];
  sum_ += value;
}

Histogram::Snapshot Histogram::Get() const {
  Snapshot s;
  s.bounds = bounds_;
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t run = 0;
  for (uint64_t c : counts_) {
    run += c;
    s.cumulative.push_back(run);
  }
  s.count = run;
  s.sum = sum_;
  return s;
}

std::string FormatPromValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  // The shortest digits that read back exactly, laid out as Python's repr(float) does:
  // positional for exponents in [-4, 16), else d.ddde+XX.
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  const std::string sci(buf, r.ptr);
  const size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  const int exp = std::atoi(sci.c_str() + e + 1);
  const bool neg = mantissa[0] == '-';
  if (neg) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out += "0." + std::string(size_t(-exp - 1), '0') + digits;
    } else if (size_t(exp) + 1 >= digits.size()) {
      out += digits + std::string(size_t(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, size_t(exp) + 1) + "." + digits.substr(size_t(exp) + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
  return out + ebuf;
}

std::string EscapeLabelValue(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

void PrometheusWriter::Header(const std::string& name, const std::string& help, const char* type) {
  out_ += "# HELP " + name + " " + help + "\n";
  out_ += "# TYPE " + name + " " + type + "\n";
}

void PrometheusWriter::Sample(const std::string& name, const Labels& labels, double value) {
  out_ += name;
  if (!labels.empty()) {
    out_ += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i) out_ += ',';
      out_ += labels[i].first + "=\"" + EscapeLabelValue(labels[i].second) + "\"";
    }
    out_ += '}';
  }
  out_ += ' ' + FormatPromValue(value) + '\n';
}

void PrometheusWriter::AddGauge(const std::string& name, const std::string& help,
                             const std::vector<std::pair<Labels, double>>& samples) {
  Header(name, help, "gauge");
  for (const auto& [labels, v] : samples) Sample(name, labels, v);
}

void PrometheusWriter::AddCounter(const std::string& name, const std::string& help,
                               const std::vector<std::pair<Labels, double>>& samples) {
  Header(name, help, "counter");
  for (const auto& [labels, v] : samples) Sample(name, labels, v);
}

void PrometheusWriter::AddHistogram(const std::string& name, const std::string& help, const Labels& labels,
                                 const Histogram::Snapshot& s) {
  Header(name, help, "histogram");
  for (size_t i = 0; i <= s.bounds.size(); ++i) {
    Labels l = labels;
    l.emplace_back("le", i < s.bounds.size() ? FormatPromValue(s.bounds[i]) : "+Inf");
    Sample(name + "_bucket", l, double(s.cumulative[i]));
  }
  Sample(name + "_count", labels, double(s.count));
  Sample(name + "_sum", labels, s.sum);
}

}  // namespace gk::server
