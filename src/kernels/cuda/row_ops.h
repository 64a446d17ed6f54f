// The decoder's row operations on the GPU, the CUDA twins of kernels/ops.h (same formulas, f32
// arithmetic): RMSNorm (x·w, Gemma's convention: the weight is used as stored), GeLU(tanh) gate,
// logit soft-cap, and the scaled embedding-row gather from a bf16 table. Pointers are device
// memory; each call queues one kernel on `stream` and returns its launch error.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "util/result.h"

namespace gk::cuda {

// y[r] = x[r] / sqrt(mean(x[r]²) + eps) · w (w null: no weight), rows of n; y may be x.
Status RmsNormRows(const float* x, const float* w, int64_t rows, int64_t n, float eps, float* y, cudaStream_t stream);
// out[i] = gelu_tanh(gate[i]) · up[i]; out may be gate.
Status GeluTanhMul(const float* gate, const float* up, int64_t n, float* out, cudaStream_t stream);
// x[i] = cap · tanh(x[i] / cap).
Status Softcap(float* x, int64_t n, float cap, cudaStream_t stream);
// out[t] = table[tokens[t]] · scale, rows of D bf16 widened to f32; ids outside [0, rows) give
// zero rows (the caller checks ids first; this keeps a bad one from reading outside the table).
Status EmbedRowsBf16(const uint16_t* table, int64_t rows, int64_t D, const int32_t* tokens, int64_t T, float scale,
                     float* out, cudaStream_t stream);

}  // namespace gk::cuda
