// The training step's row operations on the GPU, the CUDA twins of kernels/train_ops.h and
// engines/train/adamw.h (same formulas, same accumulation precision), for the GPU trainer
// (issue "CUDA training"): the backward passes of RMSNorm, GeGLU (RoPE's: decoder_ops.h's
// RopeRows, inverse) and the MoE block's weighted sum, the cross-entropy
// gradient of a chunk of the vocabulary's logits, the sum of squares of the global gradient
// norm, and the AdamW update. Pointers are device memory; each call queues one kernel on
// `stream`.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "util/result.h"

namespace gk::cuda {

// RmsNormBackward on each of `rows` rows of n: dx = r·g − r³·x·mean(g·x), g = dy·w (w null: the
// weightless norm); sums in double. dx overwritten, or added to when accumulate.
Status RmsNormBackwardRows(const float* x, const float* w, int64_t rows, int64_t n, float eps, const float* dy,
                           float* dx, bool accumulate, cudaStream_t stream);
// out = gelu_tanh(gate)·up: dgate = dout·up·gelu'(gate), dup = dout·gelu(gate), n elements.
Status GeluTanhMulBackward(const float* gate, const float* up, const float* dout, int64_t n, float* dgate, float* dup,
                           cudaStream_t stream);
// The same over `rows` rows of n, each row's gate and up at row stride in_stride (the experts'
// fused gate|up rows: up = gate + Fe), dout at dout_stride, dgate and dup at out_stride.
Status GeluTanhMulBackwardRows(const float* gate, const float* up, int64_t in_stride, const float* dout,
                               int64_t dout_stride, int64_t rows, int64_t n, float* dgate, float* dup, int64_t out_stride,
                               cudaStream_t stream);
// The MoE output y[t] = Σ_j w_j · eo_j backward, per slot i of n (token[i], weight[i], the
// expert's output row eo_i): deo_i = w_i · dy[token[i]], dw[i] = dy[token[i]] · eo_i (summed in
// double, as TrainingModel::MoeBackward). Rows of D.
Status MoeSlotBackward(const float* dy, int64_t D, const int32_t* token, const float* weight, const float* eo, int64_t n,
                       float* deo, float* dw, cudaStream_t stream);
// CrossEntropyGradRow on each row r of a chunk of logits z (rows × n, the chunk's first
// vocabulary id v0): z_j ← scale·(exp(z_j − lse_r) − [v0 + j = target_r])·(1 − (z_j/cap)²).
Status CrossEntropyGradRows(float* z, int64_t rows, int64_t n, const float* lse, const int32_t* target, int64_t v0,
                            float cap, float scale, cudaStream_t stream);
// LoRA dropout, TrainingModel::DropoutInput's mask (kernels/train_ops.h's CounterUniform of
// (key, element)): out[i] = x[i]·(1/(1−p)) where CounterUniform(key, i) ≥ p, else 0.
Status LoraDropout(const float* x, int64_t n, uint64_t key, float p, float* out, cudaStream_t stream);
// Its backward pass: dx[i] += g[i]·(1/(1−p)) where the same mask keeps element i.
Status LoraDropoutBackwardAdd(const float* g, int64_t n, uint64_t key, float p, float* dx, cudaStream_t stream);
// *sum_sq += Σ g² over n floats, in double (GlobalGradNorm's sum; *sum_sq is device memory).
Status AddSumOfSquares(const float* g, int64_t n, double* sum_sq, cudaStream_t stream);
// g *= s over n floats (ClipByGlobalNorm's scaling).
Status ScaleInPlace(float* g, int64_t n, float s, cudaStream_t stream);
// One AdamW update of n parameters, per element in double as AdamW::Step (the same bits):
// m = b1·m + (1−b1)·g; v = b2·v + (1−b2)·g²; p −= decay·p + step_size·m / (sqrt(v)·inv_bc2_sqrt + eps),
// with step_size = lr/(1 − b1^t), inv_bc2_sqrt = 1/sqrt(1 − b2^t), decay = lr·weight_decay.
struct AdamWUpdate {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double step_size = 0, inv_bc2_sqrt = 1, decay = 0;
};
Status AdamWStep(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWUpdate& u,
                 cudaStream_t stream);

}  // namespace gk::cuda
