// Backward passes of the decoder's row operations (kernels/ops.h), float32, and the
// counter-based random numbers of LoRA dropout.
#pragma once

#include <cstdint>

#include "kernels/host_device.h"

namespace gk {

// Input gradient of y = RmsNorm(x; w) over n elements (w null: the weightless norm):
//   r = (mean(x²) + eps)^-½,  g = dy·w,  dx = r·g − r³·x·mean(g·x).
// dx is overwritten, or added to when accumulate. The norms are frozen: no weight gradient.
void RmsNormBackward(const float* x, const float* w, int64_t n, float eps, const float* dy, float* dx,
                     bool accumulate);

// out = gelu_tanh(gate)·up: dgate = dout·up·gelu'(gate), dup = dout·gelu(gate).
void GeluTanhMulBackward(const float* gate, const float* up, const float* dout, int64_t n, float* dgate,
                         float* dup);
float GeluTanhDerivative(float x);

// Loss-head row kernels over the (capped) logits z[0, n) of one target row:
// the largest logit (its first index into *arg) ...
float RowMaxArg(const float* z, int64_t n, int64_t* arg);
// ... Σ exp(z − m) in double ...
double SumExpMinus(const float* z, int64_t n, float m);
// ... and, in place, the gradient of the row's cross-entropy with respect to the pre-cap
// logits: z_j ← scale·(exp(z_j − lse) − [j = target])·(1 − (z_j/cap)²) (cap 0: no cap factor).
// target outside [0, n) is in another chunk of the vocabulary.
void CrossEntropyGradRow(float* z, int64_t n, float lse, int64_t target, float cap, float scale);
// SumExpMinus and CrossEntropyGradRow(z, n, m, -1, cap, 1) in one pass (one exp per logit
// instead of two): returns Σ exp(z − m), z_j ← exp(z_j − m)·(1 − (z_j/cap)²). The same numbers
// as the two calls.
double SumExpMinusAndGradRow(float* z, int64_t n, float m, float cap);
double SumExpMinusAvx2(const float* z, int64_t n, float m);
float RowMaxArgAvx2(const float* z, int64_t n, int64_t* arg);
double SumExpMinusAndGradRowAvx2(float* z, int64_t n, float m, float cap);
void CrossEntropyGradRowAvx2(float* z, int64_t n, float lse, int64_t target, float cap, float scale);
int64_t GeluTanhMulBackwardAvx2(const float* gate, const float* up, const float* dout, int64_t n, float* dgate,
                                float* dup);  // elements done

// A uniform float in [0, 1) that depends only on (key, index): SplitMix64 of the pair. Dropout
// masks drawn this way are the same when the forward pass is recomputed (remat) or a run is
// resumed, without storing the mask or an RNG state.
GK_HOST_DEVICE inline float CounterUniform(uint64_t key, uint64_t index) {
  uint64_t z = key + 0x9E3779B97F4A7C15ull * (index + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return float(z >> 40) * (1.f / 16777216.f);
}
uint64_t MixKey(uint64_t a, uint64_t b);

}  // namespace gk
