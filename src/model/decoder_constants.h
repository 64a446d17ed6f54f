// Constants of the decoder derived from its config, shared by the inference forward pass
// (gemma_model.cc) and the trainer's (train/training_model.cc) so that both compute the same
// function.
#pragma once

#include <vector>

#include "model/config.h"
#include "tensor/dtype.h"

namespace gk {

// Inverse frequencies of rotate-half RoPE. Only the first partial·H/2 pairs rotate, and the
// exponent's denominator is always the full head dim ("proportional" RoPE of full layers).
std::vector<float> RopeInvFreq(const RopeParams& r, int H);

// sqrt(n) as the weights' dtype holds it (the reference implementations round it): the
// embedding scale.
float ScaleInDtype(int n, DType dt);

// The attention score scale: 1 on Gemma 4 (folded into q_norm), query_pre_attn_scalar^-½ on Gemma 3.
float AttentionScale(const ModelConfig& c);

}  // namespace gk
