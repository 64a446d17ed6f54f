#include "engines/generate/sampler.h"

#include <algorithm>
#include <cmath>

#include "kernels/ops.h"

namespace gk {

namespace {

// Sorting all 262,144 logits per token costs more than a small model's forward pass, so the
// nucleus is looked for among the best kProbe candidates first (one O(V) selection), then
// 16 times as many, and the full sort only runs when those do not reach top_p.
constexpr size_t kProbe = 1024;

}  // namespace

int32_t Sampler::Sample(const float* logits, int64_t n) {
  if (params_.temperature <= 0.f) return int32_t(ArgMax(logits, n));
  // One pass turns logits into unnormalised probabilities exp((x - max) / T); ordering by
  // probability equals ordering by logit.
  const float inv_t = 1.f / params_.temperature;
  float top = logits[0];
  for (int64_t i = 1; i < n; ++i) top = std::max(top, logits[i]);
  candidates_.resize(size_t(n));
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float p = std::exp((logits[i] - top) * inv_t);
    candidates_[size_t(i)] = {p, int32_t(i)};
    total += p;
  }
  auto by_prob = [](const auto& a, const auto& b) { return a.first > b.first || (a.first == b.first && a.second < b.second); };

  size_t keep = size_t(n);
  if (params_.top_k > 0 && size_t(params_.top_k) < keep) keep = size_t(params_.top_k);
  bool probed = false;  // candidates cut to the probe: top_p mass is relative to all tokens
  for (size_t probe = kProbe; params_.top_p < 1.f && params_.top_k == 0 && probe < keep; probe *= 16) {
    std::nth_element(candidates_.begin(), candidates_.begin() + long(probe), candidates_.end(), by_prob);
    double probe_mass = 0;
    for (size_t i = 0; i < probe; ++i) probe_mass += candidates_[i].first;
    if (probe_mass / total >= params_.top_p) {
      keep = probe;
      probed = true;
      break;
    }
  }
  if (keep < candidates_.size()) {
    if (!probed) std::nth_element(candidates_.begin(), candidates_.begin() + long(keep), candidates_.end(), by_prob);
    candidates_.resize(keep);
  }
  double kept = 0;
  for (const auto& c : candidates_) kept += c.first;
  if (params_.top_p < 1.f) {  // smallest prefix whose mass (of the top-k survivors) reaches top_p
    std::sort(candidates_.begin(), candidates_.end(), by_prob);
    const double denom = probed ? total : kept;
    double mass = 0;
    size_t cut = 0;
    while (cut < candidates_.size()) {
      mass += candidates_[cut++].first / denom;
      if (mass >= params_.top_p) break;
    }
    candidates_.resize(cut);
    kept = 0;
    for (const auto& c : candidates_) kept += c.first;
  }
  double r = std::uniform_real_distribution<double>(0.0, kept)(rng_);
  for (const auto& c : candidates_) {
    r -= c.first;
    if (r < 0) return c.second;
  }
  return candidates_.back().second;
}

}  // namespace gk
