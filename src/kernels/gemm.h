// Float32 matrix products for the trainer, through OpenBLAS's sgemm (0.85 of this machine's
// FMA peak against 0.44 for our own prefill kernels, docs/PERF.md) or, multi-threaded on
// AVX-512 CPUs, oneDNN's (gemm.cc says why; GEMMAKIT_SGEMM=openblas|onednn), and products against
// frozen weight matrices in their storage dtype: bf16/f16/Q8_0 matrices are widened to f32 a
// panel of rows at a time into scratch, so the weights stay in their checkpoint dtype in
// memory and the widening (O(rows·cols)) is amortised over the T rows of activations.
//
// The library threads each call itself (OpenBLAS's threads or oneDNN's OpenMP team); call these
// from one thread (the trainer's), not from inside ThreadPool loops.
#pragma once

#include <cstdint>

#include "tensor/matrix.h"
#include "tensor/thread_pool.h"

namespace gk {

// C (M×N) = alpha·op(A)·op(B) + beta·C, row-major; op(A) is M×K, op(B) is K×N.
void Sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// y (T×w.rows, row stride w.rows) = x (T×w.cols)·Wᵀ, or y += when accumulate.
void WeightMatMul(const MatrixView& w, const float* x, int64_t T, float* y, bool accumulate, ThreadPool& pool);

// dx (T×w.cols) = dy (T×w.rows)·W, or dx += when accumulate: the input gradient of
// WeightMatMul.
void WeightMatMulT(const MatrixView& w, const float* dy, int64_t T, float* dx, bool accumulate, ThreadPool& pool);

// Sgemm on the calling thread alone (oneDNN's sgemm with a team of one), for many small
// products run side by side from inside ThreadPool loops (the trainer's attention heads).
void SgemmOneThread(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                    int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// Rows [r0, r1) of y = x·Wᵀ (y row stride w.rows) on the calling thread, through a
// single-threaded sgemm per widened panel. MatMul's prefill route calls it from every pool
// thread on distinct row ranges, so both cores stream their own rows of W and OpenBLAS's own
// threads stay out of it (see EnsureGemmThreads).
void WeightMatMulRows(const MatrixView& w, const float* x, int64_t T, float* y, int64_t r0, int64_t r1);

// Sets the sgemm thread count (OpenBLAS's pool or oneDNN's OpenMP team, separate from ours).
void SetGemmThreads(int threads);
// The same, only when it differs: the trainer wants the library's threads (one sgemm from the
// trainer's thread), MatMul's prefill route wants one (an sgemm per pool thread), and a process
// (the tests) may run both.
void EnsureGemmThreads(int threads);

// "oneDNN" or "OpenBLAS": the library Sgemm uses with this many threads.
const char* SgemmLibrary(int threads);
// For tests and benchmarks: 0 OpenBLAS, 1 oneDNN (multi-threaded calls), -1 the default choice.
void ForceSgemmLibrary(int library);

}  // namespace gk
