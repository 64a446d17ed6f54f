#include "engines/serve/token_logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace gk {

LogprobResult TokenLogprobs(const float* logits, int64_t n, int32_t token, int k) {
  float mx = -INFINITY;
  for (int64_t i = 0; i < n; ++i) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(double(logits[i]) - mx);
  const double log_z = mx + std::log(sum);
  LogprobResult r;
  r.logprob = float(logits[token] - log_z);
  k = int(std::min<int64_t>(k, n));
  if (k > 0) {
    std::vector<int32_t> idx(static_cast<size_t>(n));
    std::iota(idx.begin(), idx.end(), 0);
    auto better = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
    std::nth_element(idx.begin(), idx.begin() + (k - 1), idx.end(), better);
    std::sort(idx.begin(), idx.begin() + k, better);
    for (int i = 0; i < k; ++i) r.top.emplace_back(idx[size_t(i)], float(logits[idx[size_t(i)]] - log_z));
  }
  return r;
}

}  // namespace gk
