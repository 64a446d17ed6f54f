// AdamW with decoupled weight decay over float32 parameter buffers, as torch.optim.AdamW and
// optax.adamw compute it (eps outside the square root, bias-corrected moments):
//   m = b1·m + (1-b1)·g;  v = b2·v + (1-b2)·g²;  m̂ = m/(1-b1^t);  v̂ = v/(1-b2^t)
//   p -= lr · (m̂ / (sqrt(v̂) + eps) + wd · p)          (t = 1 on the first step)
// The moments are float32 buffers shaped like the parameters; their state is exposed so that a
// checkpoint can save and restore it exactly.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace gk::train {

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double weight_decay = 0.0;
};

// One parameter buffer and its gradient (same length).
struct ParamRef {
  float* param = nullptr;
  const float* grad = nullptr;
  int64_t size = 0;
};

class AdamW {
 public:
  AdamW(AdamWOptions options, std::vector<int64_t> sizes);  // one moment pair per buffer

  // One update with learning rate lr over the buffers, in the order given at construction.
  void Step(std::span<const ParamRef> params, double lr);

  int64_t step() const { return step_; }  // updates taken so far
  const AdamWOptions& options() const { return options_; }
  // Moment buffers, per parameter buffer (for checkpoints).
  std::vector<std::vector<float>>& m() { return m_; }
  std::vector<std::vector<float>>& v() { return v_; }
  void set_step(int64_t s) { step_ = s; }

 private:
  AdamWOptions options_;
  int64_t step_ = 0;
  std::vector<std::vector<float>> m_, v_;
};

// sqrt(sum of squares) over every gradient buffer, accumulated in double.
double GlobalGradNorm(std::span<const std::span<const float>> grads);
// Scales gradients in place by max_norm / norm when norm > max_norm (optax.clip_by_global_norm,
// torch.nn.utils.clip_grad_norm_ without its 1e-6); returns the factor applied (1 when none:
// also for max_norm <= 0, "no clipping", and for a NaN norm, which the caller should act on).
double ClipByGlobalNorm(std::span<const std::span<float>> grads, double norm, double max_norm);

}  // namespace gk::train
