#include "engines/train/adamw.h"

#include <cmath>
#include <utility>

#include "util/result.h"

namespace gk::train {

AdamW::AdamW(AdamWOptions options, std::vector<int64_t> sizes) : options_(options) {
  m_.reserve(sizes.size());
  v_.reserve(sizes.size());
  for (int64_t n : sizes) {
    GK_ASSERT(n >= 0);
    m_.emplace_back(size_t(n), 0.f);
    v_.emplace_back(size_t(n), 0.f);
  }
}

void AdamW::Step(std::span<const ParamRef> params, double lr) {
  GK_ASSERT(params.size() == m_.size());
  ++step_;
  const double b1 = options_.beta1, b2 = options_.beta2, eps = options_.eps;
  // torch.optim.AdamW's arrangement: lr/(1-b1^t) folded into one step size and sqrt(1-b2^t)
  // divided out of sqrt(v), which is m̂/(sqrt(v̂)+eps) without forming m̂ or v̂.
  const double step_size = lr / (1.0 - std::pow(b1, double(step_)));
  const double inv_bc2_sqrt = 1.0 / std::sqrt(1.0 - std::pow(b2, double(step_)));
  const double decay = lr * options_.weight_decay;
  for (size_t b = 0; b < params.size(); ++b) {
    const ParamRef& ref = params[b];
    GK_ASSERT(size_t(ref.size) == m_[b].size());
    float* p = ref.param;
    const float* g = ref.grad;
    float* m = m_[b].data();
    float* v = v_[b].data();
    // Per element in double, stored as float32: the moments and parameters keep float32
    // state (as PyTorch's do), but no rounding happens inside one update.
    for (int64_t i = 0; i < ref.size; ++i) {
      const double gi = g[i];
      const double mi = b1 * double(m[i]) + (1.0 - b1) * gi;
      const double vi = b2 * double(v[i]) + (1.0 - b2) * gi * gi;
      m[i] = float(mi);
      v[i] = float(vi);
      const double pi = p[i];
      p[i] = float(pi - decay * pi - step_size * mi / (std::sqrt(vi) * inv_bc2_sqrt + eps));
    }
  }
}

double GlobalGradNorm(std::span<const std::span<const float>> grads) {
  double sum = 0;
  for (const auto& g : grads) {
    for (float x : g) sum += double(x) * double(x);
  }
  return std::sqrt(sum);
}

double ClipByGlobalNorm(std::span<const std::span<float>> grads, double norm, double max_norm) {
  // `norm > max_norm` is false for NaN: a NaN norm is left for the caller to act on (skip the
  // step) rather than spread over every gradient.
  if (max_norm <= 0 || !(norm > max_norm)) return 1.0;
  const double scale = max_norm / norm;
  const float s = float(scale);
  for (const auto& g : grads) {
    for (float& x : g) x *= s;
  }
  return scale;
}

}  // namespace gk::train
