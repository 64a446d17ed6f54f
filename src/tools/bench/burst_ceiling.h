// The least time a batch of sequences can take on a device from its two limits, memory bandwidth
// and matrix-product rate: the ceiling that `bench model --device cuda` holds its batched-decode
// and burst figures to, and the one that says whether a serving goal can be reached at all.
//
// B prompts of P tokens are prefilled in passes of at most `chunk` tokens, each pass at least
// max(its FLOPs / rate, the weights / bandwidth); then `steps` decode steps of all B together,
// each at least max(B · 2 · params FLOPs / rate, (weights + every row's KV) / bandwidth). A row
// reads the KV of every position it sees on every layer (sliding layers: the window; a layer
// that reads another's KV reads it again). Not counted, so that the ceiling stays an upper
// bound on speed: attention's FLOPs, the KV writes, norms and other small kernels.
#pragma once

#include <cstdint>

#include "model/config.h"

namespace gk {

struct BurstShape {
  int sequences = 0;    // B, all at once
  int prompt = 0;       // P tokens each
  int decode_steps = 0; // after the prefill (which gives each sequence its first token)
  int64_t chunk = 0;    // tokens per prefill pass; 0: all prompts in one pass
};

struct DeviceRoofline {
  double bytes_per_s = 0;  // memory bandwidth
  double flop_per_s = 0;   // matrix-product rate
};

struct BurstCeiling {
  double prefill_s = 0, decode_s = 0;
  double kv_bytes_first_step = 0, kv_bytes_last_step = 0;  // all rows' KV read by a decode step
};

// Bytes of KV one decode row reads at `context` positions (its new one included).
double KvBytesReadPerRow(const ModelConfig& c, int64_t context, int kv_elem_bytes);

// weight_bytes: what one pass streams (decode reads every weight once, the head included);
// params: multiply-adds per token through every product, the head included; head_params: the
// head's (prefill computes it for each prompt's last position only).
BurstCeiling BurstCeilingOf(const ModelConfig& c, double weight_bytes, double params, double head_params,
                            int kv_elem_bytes, const BurstShape& shape, const DeviceRoofline& device);

}  // namespace gk
