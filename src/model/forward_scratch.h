// Buffers of one forward pass, sized once for max_chunk tokens when the model is built, so
// decoding allocates nothing. Private to model/.
#pragma once

#include <vector>

namespace gk {

struct ForwardScratch {
  std::vector<float> x;          // (T, D) residual stream
  std::vector<float> x_emb;      // (T, D) scaled token embeddings (PLE input)
  std::vector<float> xn;         // (T, D) normed input of a block
  std::vector<float> q;          // (T, N·Hmax)
  std::vector<float> k, v;       // (T, Kmax·Hmax)
  std::vector<float> att;        // (T, N·Hmax) attention output before o_proj
  std::vector<float> out;        // (T, D) block output
  std::vector<std::vector<float>> rope;  // per RoPE slot (LayerRope): (T, H) per token cosines, then sines (RopeCosSin)
  std::vector<float> gate, up;   // (T, Fmax)
  std::vector<float> ple;        // (T, L·P) per-layer inputs
  std::vector<float> ple_gate;   // (T, P)
  std::vector<float> ple_tok;    // (L·P) one token's per-layer embedding row; (T, L·P) under tensor parallelism
  std::vector<float> router;     // (T, E)
  std::vector<float> moe_x;      // (T, D)
  std::vector<float> moe_out;    // (T, D)
  std::vector<std::vector<float>> expert_tmp;  // per thread: (3·Fe + D)
  std::vector<float> tp_logits;    // tensor parallelism: (rows, V / tp) this rank's logits
  std::vector<float> tp_gathered;  // (tp, rows, V / tp) every rank's
};

}  // namespace gk
