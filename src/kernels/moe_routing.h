// Gemma 4's mixture-of-experts routing (26B-A4B), one token at a time, and its backward pass:
// the inference engine, the CPU trainer and the GPU trainer's host side all route through these,
// so that they choose the same experts from the same logits.
#pragma once

#include <cstdint>

namespace gk {

// probs: the token's E router logits on entry, their softmax on return. top[j], weight[j] for
// j < k: the k most likely experts (the lower index first among equal ones) and their
// probabilities renormalised over the k, times per_expert_scale. idx: E ints of scratch.
void RouteToken(float* probs, int64_t E, int64_t k, const float* per_expert_scale, int32_t* top, float* weight,
                int32_t* idx);

// The gradient of the token's router logits dz (E) from the gradients of its routing weights
// dw (k), through the renormalisation w_j = p_j / S · scale_j (S = Σ_top p) and the softmax:
// dp_j = (dw_j·scale_j − Σ_i dw_i·w_i) / S on the chosen experts, 0 elsewhere; dz = p ∘ (dp − p·dp).
void RouteTokenBackward(const float* probs, int64_t E, int64_t k, const int32_t* top, const float* weight,
                        const float* dw, const float* per_expert_scale, float* dz);

// The n = T·k slots (token t's j-th choice is slot t·k + j) grouped by expert, stably (by token
// within an expert): expert e's slots are order[expert_begin[e] .. expert_begin[e + 1]).
// expert_begin: E + 1 entries.
void GroupSlotsByExpert(const int32_t* top, int64_t n, int64_t E, int64_t* expert_begin, int32_t* order);

}  // namespace gk
