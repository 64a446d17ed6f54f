#include "tools/bench_serve/arrivals.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "util/result.h"

namespace gk::bench {

std::vector<double> GammaGaps(int n, double rate, double burstiness, uint64_t seed) {
  GK_ASSERT(rate > 0 && burstiness > 0);  // the CLI validates the flags before this
  std::vector<double> gaps(std::max(n, 0), 0.0);
  if (std::isinf(rate)) return gaps;  // everything at t = 0
  if (std::isinf(burstiness)) {
    std::fill(gaps.begin(), gaps.end(), 1.0 / rate);  // the limit of Gamma as the shape grows
    return gaps;
  }
  std::mt19937_64 rng(seed);
  std::gamma_distribution<double> gamma(burstiness, 1.0 / (rate * burstiness));  // mean 1/rate
  for (double& g : gaps) g = gamma(rng);
  return gaps;
}

std::vector<double> ArrivalOffsets(int n, double rate, double burstiness, uint64_t seed) {
  std::vector<double> t = GammaGaps(n, rate, burstiness, seed);
  for (size_t i = 1; i < t.size(); ++i) t[i] += t[i - 1];  // the first request waits one gap too
  if (t.empty() || t.back() == 0) return t;
  // vLLM rescales so the last request leaves at exactly n / rate: the sum of random gaps is 1-2%
  // off, which would otherwise show up as seed-to-seed throughput noise.
  const double target = n / rate, factor = target / t.back();
  for (double& x : t) x = std::min(x * factor, target);  // min: rounding must not pass the last
  t.back() = target;
  return t;
}

}  // namespace gk::bench
