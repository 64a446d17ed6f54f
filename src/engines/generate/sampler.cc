#include "engines/generate/sampler.h"

#include <algorithm>
#include <cmath>

#include "kernels/ops.h"

namespace gk {

namespace {

using Candidate = std::pair<float, int32_t>;  // (unnormalised probability, token)

bool MoreLikely(const Candidate& a, const Candidate& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

// Reorders c so that its first `cut` elements are the most likely ones whose mass first
// reaches `target`, and returns cut. A weighted quickselect: each round splits the open range
// at its median, so the whole search is O(n); sorting 262,144 candidates per token would cost
// more than a small model's forward pass.
size_t NucleusCut(std::vector<Candidate>& c, double target) {
  size_t lo = 0, hi = c.size();  // [0, lo) is in the nucleus; the cut lies in (lo, hi]
  while (hi - lo > 1) {
    const size_t mid = lo + (hi - lo) / 2;
    std::nth_element(c.begin() + long(lo), c.begin() + long(mid), c.begin() + long(hi), MoreLikely);
    double upper = 0;
    for (size_t i = lo; i < mid; ++i) upper += c[i].first;
    if (upper >= target) {
      hi = mid;
    } else {
      target -= upper;
      lo = mid;
    }
  }
  return hi;
}

}  // namespace

int32_t Sampler::Sample(const float* logits, int64_t n) {
  if (params_.temperature <= 0.f) return int32_t(ArgMax(logits, n));
  // One pass turns logits into unnormalised probabilities exp((x - max) / T); ordering by
  // probability equals ordering by logit.
  const float inv_t = 1.f / params_.temperature;
  float top = logits[0];
  for (int64_t i = 1; i < n; ++i) top = std::max(top, logits[i]);
  candidates_.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) candidates_[size_t(i)] = {std::exp((logits[i] - top) * inv_t), int32_t(i)};
  if (params_.top_k > 0 && params_.top_k < n) {
    std::nth_element(candidates_.begin(), candidates_.begin() + params_.top_k, candidates_.end(), MoreLikely);
    candidates_.resize(size_t(params_.top_k));
  }
  double kept = 0;
  for (const auto& c : candidates_) kept += c.first;
  if (params_.top_p < 1.f) {  // nucleus of the top-k survivors, renormalised
    candidates_.resize(NucleusCut(candidates_, double(params_.top_p) * kept));
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

TokenPick Sampler::NextPick() {
  TokenPick p{params_.temperature, params_.top_k, params_.top_p, 0};
  if (p.temperature > 0.f) p.key = rng_();
  return p;
}

}  // namespace gk
