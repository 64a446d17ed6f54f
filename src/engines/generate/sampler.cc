#include "engines/generate/sampler.h"

#include <algorithm>
#include <cmath>

#include "kernels/ops.h"

namespace gk {

int32_t Sampler::Sample(const float* logits, int64_t n) {
  if (params_.temperature <= 0.f) return int32_t(ArgMax(logits, n));
  candidates_.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) candidates_[size_t(i)] = {logits[i], int32_t(i)};
  auto by_logit = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };
  size_t keep = size_t(n);
  if (params_.top_k > 0 && size_t(params_.top_k) < keep) {
    keep = size_t(params_.top_k);
    std::nth_element(candidates_.begin(), candidates_.begin() + long(keep), candidates_.end(), by_logit);
  }
  candidates_.resize(keep);
  std::sort(candidates_.begin(), candidates_.end(), by_logit);
  // Softmax at the temperature, over the survivors.
  const float inv_t = 1.f / params_.temperature, top = candidates_[0].first;
  double total = 0;
  for (auto& c : candidates_) {
    c.first = float(std::exp(double(c.first - top) * inv_t));
    total += c.first;
  }
  if (params_.top_p < 1.f) {  // smallest prefix whose mass reaches top_p
    double mass = 0;
    size_t cut = 0;
    while (cut < candidates_.size()) {
      mass += candidates_[cut++].first / total;
      if (mass >= params_.top_p) break;
    }
    candidates_.resize(cut);
    total = 0;
    for (const auto& c : candidates_) total += c.first;
  }
  double r = std::uniform_real_distribution<double>(0.0, total)(rng_);
  for (const auto& c : candidates_) {
    r -= c.first;
    if (r < 0) return c.second;
  }
  return candidates_.back().second;
}

}  // namespace gk
