#include "kernels/token_pick.h"

#include <algorithm>
#include <numeric>

#include "kernels/ops.h"

namespace gk {

std::vector<int32_t> TokenPickSurvivors(const float* logits, int64_t n, const TokenPick& p) {
  std::vector<int32_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    const uint32_t ka = LogitOrderKey(logits[a]), kb = LogitOrderKey(logits[b]);
    return ka > kb || (ka == kb && a < b);
  });
  if (p.top_k > 0 && p.top_k < n) order.resize(size_t(p.top_k));
  if (p.top_p < 1.f && !order.empty()) {
    const float max = logits[order[0]], inv_t = 1.f / p.temperature;
    double kept = 0;
    for (int32_t i : order) kept += RaceWeight(logits[i], max, inv_t);
    const double target = double(p.top_p) * kept;
    double mass = 0;
    size_t cut = order.size();
    for (size_t c = 0; c < order.size(); ++c) {
      mass += RaceWeight(logits[order[c]], max, inv_t);
      if (mass >= target) {
        cut = c + 1;
        break;
      }
    }
    order.resize(cut);
  }
  return order;
}

int32_t PickTokenReference(const float* logits, int64_t n, const TokenPick& p) {
  if (p.temperature <= 0.f) return int32_t(ArgMax(logits, n));
  const std::vector<int32_t> survivors = TokenPickSurvivors(logits, n, p);
  const float max = logits[survivors[0]], inv_t = 1.f / p.temperature;
  int32_t best = survivors[0];
  float best_score = RaceScore(logits[best], max, inv_t, p.key, best);
  for (int32_t i : survivors) {
    const float s = RaceScore(logits[i], max, inv_t, p.key, i);
    if (s > best_score || (s == best_score && i < best)) {
      best_score = s;
      best = i;
    }
  }
  return best;
}

}  // namespace gk
