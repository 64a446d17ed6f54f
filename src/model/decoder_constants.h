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

// RoPE of every layer: the layers of one type and head dim share inverse frequencies (and the
// forward pass's per-token cos/sin table), a "slot". Two slots (sliding, full) unless
// per-layer overrides give a type several head dims.
struct LayerRope {
  std::vector<int> slot;                     // per layer
  std::vector<int> head_dim;                 // per slot
  std::vector<std::vector<float>> inv_freq;  // per slot: head_dim / 2 entries
  const float* InvFreq(int l) const { return inv_freq[size_t(slot[size_t(l)])].data(); }
};
LayerRope MakeLayerRope(const ModelConfig& c);

// sqrt(n) as the weights' dtype holds it (the reference implementations round it): the
// embedding scale.
float ScaleInDtype(int n, DType dt);

// The attention score scale: 1 on Gemma 4 (folded into q_norm), query_pre_attn_scalar^-½ on Gemma 3.
float AttentionScale(const ModelConfig& c);

}  // namespace gk
