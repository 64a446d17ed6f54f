// Products against frozen bf16 weight matrices with the activations rounded to bf16 and f32
// accumulation (what PyTorch, vLLM and llama.cpp compute for bf16 models), through oneDNN's
// bf16 matmul on CPUs with AVX-512 BF16. The weights are read in their checkpoint layout (no
// copy, no widening), the activations rounded into scratch. The building block of the trainer's
// bf16 precision (issue "CPU: bf16 by default"), which is not wired in yet: its gradients are
// first to be checked against PyTorch doing the same in bf16. f32 products: kernels/gemm.h.
#pragma once

#include <cstdint>

#include "tensor/matrix.h"
#include "tensor/thread_pool.h"

namespace gk {

// Whether this CPU runs oneDNN's bf16 matmul natively (AVX-512 BF16, AVX-512 kernels active),
// and w is a row-major bf16 matrix these functions take.
bool Bf16ProductsAvailable(const MatrixView& w);

// y (T×w.rows) = bf16(x) (T×w.cols)·Wᵀ, or y += when accumulate. Requires Bf16ProductsAvailable(w).
void Bf16WeightMatMul(const MatrixView& w, const float* x, int64_t T, float* y, bool accumulate, ThreadPool& pool);
// dx (T×w.cols) = bf16(dy) (T×w.rows)·W, or dx += when accumulate.
void Bf16WeightMatMulT(const MatrixView& w, const float* dy, int64_t T, float* dx, bool accumulate, ThreadPool& pool);

}  // namespace gk
