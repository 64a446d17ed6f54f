#include "tools/bench_serve/metrics.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <utility>

namespace gk::bench {
namespace {

// numpy's pairwise summation (add.reduce on float64), so means agree with vLLM's to the last bit.
double PairwiseSum(const double* a, size_t n) {
  if (n < 8) {
    double s = 0;  // numpy starts from -0.0; the sign only shows for an all-negative-zero input
    for (size_t i = 0; i < n; ++i) s += a[i];
    return s;
  }
  if (n <= 128) {
    double r[8];
    for (int k = 0; k < 8; ++k) r[k] = a[k];
    size_t i = 8;
    for (; i + 8 <= n; i += 8) {
      for (int k = 0; k < 8; ++k) r[k] += a[i + k];
    }
    double s = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) s += a[i];
    return s;
  }
  size_t half = n / 2;
  half -= half % 8;
  return PairwiseSum(a, half) + PairwiseSum(a + half, n - half);
}

double Mean(const std::vector<double>& v) { return PairwiseSum(v.data(), v.size()) / static_cast<double>(v.size()); }

// np.std with ddof 0: sqrt(mean(|x - mean|^2)).
double PopulationStd(const std::vector<double>& v, double mean) {
  std::vector<double> sq(v.size());
  for (size_t i = 0; i < v.size(); ++i) sq[i] = (v[i] - mean) * (v[i] - mean);
  return std::sqrt(Mean(sq));
}

// np.median: the middle element, or the mean of the two middle ones.
double SortedMedian(const std::vector<double>& sorted) {
  const size_t n = sorted.size();
  if (n % 2 == 1) return sorted[n / 2];
  return (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0;
}

// numpy's linear method on sorted input, including its _lerp, which interpolates from the upper
// neighbour when the fraction is >= 0.5.
double SortedPercentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  const double q = std::clamp(p, 0.0, 100.0) / 100.0;
  const double rank = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = std::min(static_cast<size_t>(std::floor(rank)), sorted.size() - 1);
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double t = rank - static_cast<double>(lo);
  const double a = sorted[lo], b = sorted[hi], diff = b - a;
  return t >= 0.5 ? b - diff * (1 - t) : a + diff * t;
}

// One successful request as calculate_metrics sees it.
struct GoodputSample {
  double ttft, tpot, e2el;
};

bool IsGood(const GoodputSample& s, const GoodputSlo& slo) {
  // vLLM converts each SLO to seconds and keeps the request when slo >= value.
  if (slo.ttft_ms && !(*slo.ttft_ms / 1000.0 >= s.ttft)) return false;
  if (slo.tpot_ms && !(*slo.tpot_ms / 1000.0 >= s.tpot)) return false;
  if (slo.e2el_ms && !(*slo.e2el_ms / 1000.0 >= s.e2el)) return false;
  return true;
}

// Largest count of token timestamps in one 1-second bin; bins start at the earliest successful
// start and there are ceil(max_end - min_start) + 1 of them, as vLLM's tokens_per_second array.
double PeakOutputTokensPerSecond(const std::vector<const RequestOutcome*>& ok) {
  double min_start = ok[0]->start_time, max_end = ok[0]->start_time + ok[0]->latency;
  for (const RequestOutcome* o : ok) {
    min_start = std::min(min_start, o->start_time);
    max_end = std::max(max_end, o->start_time + o->latency);
  }
  const double bins = std::ceil(max_end - min_start) + 1;
  // Sorting the bin indices instead of allocating the bins keeps bad timestamps from costing
  // memory; the counts are the same.
  std::vector<long long> buckets;
  for (const RequestOutcome* o : ok) {
    double t = o->start_time + o->ttft;
    for (size_t k = 0;; ++k) {
      const double offset = t - min_start;  // Python int(): truncates toward zero
      if (std::isfinite(offset) && std::trunc(offset) >= 0 && std::trunc(offset) < bins) {
        buckets.push_back(static_cast<long long>(offset));
      }
      if (k == o->itl.size()) break;
      t += o->itl[k];
    }
  }
  std::sort(buckets.begin(), buckets.end());
  size_t best = 0;
  for (size_t i = 0, j = 0; i < buckets.size(); i = j) {
    while (j < buckets.size() && buckets[j] == buckets[i]) ++j;
    best = std::max(best, j - i);
  }
  return static_cast<double>(best);
}

// Sweep line over [start, start + latency); at equal times departures (-1) sort first.
int PeakConcurrency(const std::vector<const RequestOutcome*>& ok) {
  std::vector<std::pair<double, int>> events;
  events.reserve(ok.size() * 2);
  for (const RequestOutcome* o : ok) {
    if (!std::isfinite(o->start_time + o->latency)) continue;  // a NaN would break the sort
    events.emplace_back(o->start_time, 1);
    events.emplace_back(o->start_time + o->latency, -1);
  }
  std::sort(events.begin(), events.end());
  int current = 0, peak = 0;
  for (const auto& e : events) {
    current += e.second;
    peak = std::max(peak, current);
  }
  return peak;
}

Status BadGoodputWord(const std::string& word, const std::string& why) {
  return Status::Error(StrCat("--goodput \"", word, "\": ", why));
}

}  // namespace

double Percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  return SortedPercentile(values, p);
}

MetricStats ComputeStats(const std::vector<double>& seconds, const std::vector<double>& percentiles) {
  MetricStats s;
  if (seconds.empty()) {
    for (double p : percentiles) s.percentiles_ms.emplace_back(p, 0.0);
    return s;
  }
  std::vector<double> sorted = seconds;
  std::sort(sorted.begin(), sorted.end());
  // vLLM takes the statistics in seconds and then multiplies by 1000; so do we.
  const double mean = Mean(seconds);
  s.mean_ms = mean * 1000;
  s.median_ms = SortedMedian(sorted) * 1000;
  s.std_ms = PopulationStd(seconds, mean) * 1000;
  for (double p : percentiles) s.percentiles_ms.emplace_back(p, SortedPercentile(sorted, p) * 1000);
  return s;
}

Result<GoodputSlo> ParseGoodput(const std::vector<std::string>& words) {
  GoodputSlo slo;
  for (const std::string& word : words) {
    const size_t colon = word.find(':');
    if (colon == std::string::npos || word.find(':', colon + 1) != std::string::npos) {
      return BadGoodputWord(word, "expected KEY:VALUE, e.g. ttft:500 (milliseconds)");
    }
    const std::string name = word.substr(0, colon), text = word.substr(colon + 1);
    std::optional<double>* field = name == "ttft"   ? &slo.ttft_ms
                                   : name == "tpot" ? &slo.tpot_ms
                                   : name == "e2el" ? &slo.e2el_ms
                                                    : nullptr;
    if (field == nullptr) {
      return BadGoodputWord(word, StrCat("unknown metric \"", name, "\"; use ttft, tpot or e2el"));
    }
    char* end = nullptr;
    errno = 0;
    const double value = std::strtod(text.c_str(), &end);
    while (end != nullptr && (*end == ' ' || *end == '\t')) ++end;  // Python's float() allows padding
    if (text.empty() || end == text.c_str() || *end != '\0' || errno == ERANGE || std::isnan(value)) {
      return BadGoodputWord(word, StrCat("\"", text, "\" is not a number of milliseconds"));
    }
    if (value < 0) return BadGoodputWord(word, "the value must be >= 0 milliseconds");
    *field = value;  // a repeated name keeps the last value, as vLLM's dict does
  }
  return slo;
}

BenchMetrics CalculateMetrics(const std::vector<RequestOutcome>& outcomes, double duration_s,
                              const std::vector<double>& percentiles, const GoodputSlo& goodput) {
  BenchMetrics m;
  std::vector<double> ttfts, tpots, itls, e2els;
  std::vector<GoodputSample> samples;
  std::vector<const RequestOutcome*> ok;
  for (const RequestOutcome& o : outcomes) {
    if (!o.success) {
      ++m.failed;
      m.actual_output_lens.push_back(0);
      continue;
    }
    const int output_len = o.output_tokens == 0 ? 1 : o.output_tokens;
    m.actual_output_lens.push_back(output_len);
    m.total_output += output_len;
    m.total_input += o.prompt_len;
    double tpot = 0;  // requests with one token count as 0 for goodput but stay out of TPOT stats
    if (output_len > 1) {
      tpot = (o.latency - o.ttft) / (output_len - 1);
      tpots.push_back(tpot);
    }
    samples.push_back({o.ttft, tpot, o.latency});
    itls.insert(itls.end(), o.itl.begin(), o.itl.end());
    ttfts.push_back(o.ttft);
    e2els.push_back(o.latency);
    ok.push_back(&o);
    ++m.completed;
  }
  int good = 0;
  if (goodput.any()) {
    for (const GoodputSample& s : samples) good += IsGood(s, goodput) ? 1 : 0;
  }
  // vLLM divides by the duration unguarded; a zero duration would give inf/nan here.
  if (duration_s > 0) {
    m.request_throughput = m.completed / duration_s;
    m.request_goodput = goodput.any() ? good / duration_s : 0;
    m.output_throughput = static_cast<double>(m.total_output) / duration_s;
    m.total_token_throughput = static_cast<double>(m.total_input + m.total_output) / duration_s;
  }
  m.ttft = ComputeStats(ttfts, percentiles);
  m.tpot = ComputeStats(tpots, percentiles);
  m.itl = ComputeStats(itls, percentiles);
  m.e2el = ComputeStats(e2els, percentiles);
  if (!ok.empty()) {
    m.max_output_tokens_per_s = PeakOutputTokensPerSecond(ok);
    m.max_concurrent_requests = PeakConcurrency(ok);
  }
  return m;
}

}  // namespace gk::bench
