// The decoder's row operations on the GPU, the CUDA twins of kernels/ops.h (same formulas, f32
// arithmetic): RMSNorm (x·w, Gemma's convention: the weight is used as stored), alone or fused
// with the residual add (and the layer's scalar, and the norm that reads the new residual),
// GeLU(tanh) gate, logit soft-cap. The norms and the gate can also write their output as bf16
// for the products of bf16 weights that read it (bf16_staging.h). Pointers are device memory;
// each call queues one kernel on `stream` and returns its launch error.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/bf16_staging.h"
#include "util/result.h"

namespace gk::cuda {

// y[r] = x[r] / sqrt(mean(x[r]²) + eps) · w (w null: no weight), rows of n; y may be x.
Status RmsNormRows(const float* x, const float* w, int64_t rows, int64_t n, float eps, float* y, cudaStream_t stream,
                   Bf16Staging staged = {});
// The norm that reads a residual row just updated, in the same kernel: out = RMSNorm(x) · w.
struct ThenNorm {
  const float* w = nullptr;
  float* out = nullptr;  // null: none
  Bf16Staging staged;
};
// x[r] = (x[r] + RMSNorm(y[r]) · w) · scale for rows of n (the post-attention / post-MLP norm and
// residual; scale: the layer's scalar, which follows its last residual add), then `then`.
Status RmsNormAddRows(const float* y, const float* w, int64_t rows, int64_t n, float eps, float* x, cudaStream_t stream,
                      float scale = 1.f, const ThenNorm& then = {});
// out[i] = gelu_tanh(gate[i]) · up[i]; out may be gate.
Status GeluTanhMul(const float* gate, const float* up, int64_t n, float* out, cudaStream_t stream, Bf16Staging staged = {});
// x[i] = cap · tanh(x[i] / cap).
Status Softcap(float* x, int64_t n, float cap, cudaStream_t stream);
// out[r·out_stride + i] = gelu_tanh(gate[r·gate_stride + i]) · up[r·up_stride + i] for rows of n
// (out may be gate): the PLE gate, whose other factor is a strided slice, and the fused gate_up
// rows (the experts', a decode step's MLP). staged: laid out as out.
Status GeluTanhMulRows(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride, int64_t rows,
                       int64_t n, float* out, int64_t out_stride, cudaStream_t stream, Bf16Staging staged = {});
}  // namespace gk::cuda
