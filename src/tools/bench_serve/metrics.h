// The aggregate metrics of one benchmark run, defined exactly as vLLM's calculate_metrics
// (vllm/benchmarks/serve.py; restated in shared/spec/serving.md §1.2):
//  - only successful requests feed the latency lists; failed ones add 0 output tokens;
//  - TPOT per request, only when output_tokens > 1: (latency - ttft) / (output_tokens - 1),
//    then statistics across requests; a request with output_tokens <= 1 counts as tpot 0
//    for goodput only;
//  - ITL: every request's gaps pooled into one list;
//  - statistics as numpy: mean, median, population std (ddof 0), percentiles with linear
//    interpolation; an empty list gives 0; everything reported in milliseconds;
//  - goodput: requests whose every given SLO (ttft, tpot, e2el; ms) holds (value <= SLO),
//    divided by the duration;
//  - peak output tokens/s: token times start + ttft + cumulative ITLs (one per chunk, as
//    vLLM), counted in 1-second bins from the earliest successful start; the largest bin;
//  - peak concurrent requests: sweep line over half-open [start, start + latency),
//    departures before arrivals at equal times.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tools/bench_serve/request_outcome.h"
#include "util/result.h"

namespace gk::bench {

// mean, median, std and the asked percentiles of a list of seconds, in milliseconds.
struct MetricStats {
  double mean_ms = 0, median_ms = 0, std_ms = 0;
  std::vector<std::pair<double, double>> percentiles_ms;  // (p, value), in the order asked
};

// numpy.percentile(values, p) with the default linear method; p in [0, 100]; 0 when empty.
double Percentile(std::vector<double> values, double p);
MetricStats ComputeStats(const std::vector<double>& seconds, const std::vector<double>& percentiles);

// --goodput "ttft:500 tpot:50 e2el:2000": any subset, milliseconds, each >= 0.
struct GoodputSlo {
  std::optional<double> ttft_ms, tpot_ms, e2el_ms;
  bool any() const { return ttft_ms || tpot_ms || e2el_ms; }
};
// Parses the KEY:VALUE words; a bad name or value is an error naming it.
Result<GoodputSlo> ParseGoodput(const std::vector<std::string>& words);

struct BenchMetrics {
  int completed = 0, failed = 0;
  long long total_input = 0, total_output = 0;
  double request_throughput = 0, request_goodput = 0, output_throughput = 0, total_token_throughput = 0;
  MetricStats ttft, tpot, itl, e2el;
  double max_output_tokens_per_s = 0;
  int max_concurrent_requests = 0;
  std::vector<int> actual_output_lens;  // per request, 0 for failures (vLLM's output_lens)
};

// duration_s: from just before the first dispatch until every request finished.
// A successful outcome with output_tokens == 0 counts as 1 output token (vLLM without a
// tokenizer); the client fills output_tokens from usage or by re-tokenizing before this.
BenchMetrics CalculateMetrics(const std::vector<RequestOutcome>& outcomes, double duration_s,
                              const std::vector<double>& percentiles, const GoodputSlo& goodput);

}  // namespace gk::bench
