// Matrix products against weight matrices in their storage dtype (f32 or bf16).
//   y (T × rows) = x (T × cols) · Wᵀ      x: row stride cols, y: row stride rows.
// Decode is T = 1 (a matrix-vector product, bound by streaming W once); prefill and batched
// decode are T > 1 and reuse each loaded weight tile across tokens.
// Threads take contiguous row ranges so each core streams its own part of W sequentially.
#pragma once

#include <cstdint>

#include "tensor/matrix.h"
#include "tensor/thread_pool.h"

namespace gk {

void MatMul(const MatrixView& w, const float* x, int64_t T, float* y, ThreadPool& pool);

// Single-threaded, on the calling thread (for callers that parallelise over something else).
void MatMulRows(const MatrixView& w, const float* x, int64_t T, float* y, int64_t r0, int64_t r1);

// Single-threaded kernels over rows [r0, r1), one per instruction set; same contract.
void MatMulRowsScalar(const MatrixView& w, const float* x, int64_t T, float* y, int64_t r0, int64_t r1);
void MatMulRowsAvx2(const MatrixView& w, const float* x, int64_t T, float* y, int64_t r0, int64_t r1);
void MatMulRowsAvx512(const MatrixView& w, const float* x, int64_t T, float* y, int64_t r0, int64_t r1);

}  // namespace gk
