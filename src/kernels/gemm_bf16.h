// Products against frozen bf16 weight matrices with the activations rounded to bf16 and f32
// accumulation (what PyTorch, vLLM and llama.cpp compute for bf16 models): the trainer's bf16
// precision (docs/TRAIN.md). On CPUs with AVX-512 BF16 through oneDNN's bf16 matmul, the weights
// read in their checkpoint layout (no copy, no widening), the activations rounded into scratch;
// elsewhere the same numbers (rounded activations, f32 accumulation over the exact bf16 weights)
// through kernels/gemm.h's WeightMatMul, so a run's results do not depend on the CPU it ran on
// beyond the order of f32 sums. f32 products: kernels/gemm.h.
#pragma once

#include <cstdint>

#include "tensor/matrix.h"
#include "tensor/thread_pool.h"

namespace gk {

// Whether this CPU runs oneDNN's bf16 matmul natively (AVX-512 BF16, AVX-512 kernels active)
// and w is a row-major bf16 matrix: the fast route of the functions below.
bool Bf16ProductsAvailable(const MatrixView& w);

// y (T×w.rows) = bf16(x) (T×w.cols)·Wᵀ, or y += when accumulate. Any dtype WeightMatMul takes.
void Bf16WeightMatMul(const MatrixView& w, const float* x, int64_t T, float* y, bool accumulate, ThreadPool& pool);
// The same through the f32 route even where oneDNN's bf16 one is available (tests compare them).
void Bf16WeightMatMulEmulated(const MatrixView& w, const float* x, int64_t T, float* y, bool accumulate,
                              ThreadPool& pool);
// dx (T×w.cols) = bf16(dy) (T×w.rows)·W, or dx += when accumulate.
void Bf16WeightMatMulT(const MatrixView& w, const float* dy, int64_t T, float* dx, bool accumulate, ThreadPool& pool);
void Bf16WeightMatMulTEmulated(const MatrixView& w, const float* dy, int64_t T, float* dx, bool accumulate,
                               ThreadPool& pool);

}  // namespace gk
