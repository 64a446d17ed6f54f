// Per-sequence KV cache of the decoder, in float32.
// Full layers keep every position; sliding layers keep a ring of window + chunk - 1 slots
// (enough for a chunk of `chunk` new tokens to see its whole window while being written).
// KV-shared layers (E2B/E4B) have no storage: they read their source layer's cache.
// Layout per layer: k/v[slot][kv_head][H].
#pragma once

#include <cstdint>
#include <vector>

namespace gk {

struct KvLayer {
  int64_t capacity = 0;  // slots; 0 on KV-shared layers
  int kv_heads = 0;
  int head_dim = 0;
  std::vector<float> k, v;

  int64_t Slot(int64_t pos) const { return pos % capacity; }
  float* K(int64_t pos, int head) { return k.data() + (Slot(pos) * kv_heads + head) * head_dim; }
  float* V(int64_t pos, int head) { return v.data() + (Slot(pos) * kv_heads + head) * head_dim; }
  const float* K(int64_t pos, int head) const { return k.data() + (Slot(pos) * kv_heads + head) * head_dim; }
  const float* V(int64_t pos, int head) const { return v.data() + (Slot(pos) * kv_heads + head) * head_dim; }
};

struct KvCache {
  std::vector<KvLayer> layers;
  int64_t max_tokens = 0;  // positions this cache can hold (the context limit)
  int64_t num_tokens = 0;  // positions already written

  void Clear() { num_tokens = 0; }
  uint64_t Bytes() const {
    uint64_t b = 0;
    for (const auto& l : layers) b += (l.k.size() + l.v.size()) * sizeof(float);
    return b;
  }
};

}  // namespace gk
