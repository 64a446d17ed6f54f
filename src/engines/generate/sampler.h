// Next-token sampling: greedy at temperature 0, else temperature, top-k and top-p (nucleus)
// over the softmax, drawn from a seeded generator so a seed reproduces a run.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/token_pick.h"

namespace gk {

struct SamplingParams {
  float temperature = 0.f;  // 0: greedy
  int top_k = 0;            // 0: no limit
  float top_p = 1.f;        // 1: no limit
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p) : params_(p), rng_(p.seed) {}
  // Picks a token from n logits (logits are left unchanged).
  int32_t Sample(const float* logits, int64_t n);
  // How a runner that picks tokens where the logits are (ModelRunner::picks_tokens) picks the
  // next one instead: these parameters, and a key drawn from this sampler's seeded generator
  // (none at temperature 0), so the seed still reproduces the run.
  TokenPick NextPick();

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> candidates_;
};

}  // namespace gk
