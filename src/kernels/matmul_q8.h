// Matrix products against Q8_0 weights (layout above MatrixView in tensor/matrix.h), with the
// MatMul contract: y (T × rows) = x (T × cols) · Wᵀ, x with row stride cols, y with stride rows.
//
// The activations are quantized per call the same way as the weights (int8 per block of 32,
// here with an f32 scale; llama.cpp's Q8_0 × Q8_0), so each block's dot product is an exact
// integer sum, scaled once by d_w · d_x. Decode streams each weight byte once: 1.0625 bytes per
// weight against bf16's 2. MatMul(w, ...) and MatMulRows(w, ...) route kQ8_0 matrices here.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/matrix.h"
#include "tensor/thread_pool.h"

namespace gk {

struct Q8Activations {
  int64_t tokens = 0, cols = 0;
  std::vector<int32_t> q;     // (T, cols / 4): int8 codes, four per word in column order
  std::vector<float> d;       // (T, cols / 32): block scales, x ≈ d · q
  std::vector<int32_t> corr;  // (T, cols / 32): -128 · Σ q over the block (see the VNNI kernel)

  const int8_t* codes(int64_t t) const { return reinterpret_cast<const int8_t*>(q.data() + t * (cols / 4)); }
  // Sets the shape; buffers only grow, so a reused object allocates nothing once warm.
  void Resize(int64_t T, int64_t C);
};

// Quantizes tokens [t0, t1) of x (a->tokens × a->cols, already Resize'd) into *a:
// d = max|block| / 127, q = round(x / d). Every ISA path gives the same bytes.
void QuantizeActivationsQ8(const float* x, int64_t t0, int64_t t1, Q8Activations* a);

void MatMulQ8(const MatrixView& w, const float* x, int64_t T, float* y, ThreadPool& pool);
// Single-threaded, on the calling thread.
void MatMulRowsQ8(const MatrixView& w, const float* x, int64_t T, float* y, int64_t r0, int64_t r1);

// Kernels over output rows [r0, r1) (any range; whole panels are computed, only the range is
// written), one per instruction set, on activations quantized by QuantizeActivationsQ8.
void MatMulQ8Scalar(const MatrixView& w, const Q8Activations& x, float* y, int64_t r0, int64_t r1);
void MatMulQ8Avx2(const MatrixView& w, const Q8Activations& x, float* y, int64_t r0, int64_t r1);
void MatMulQ8Avx512Vnni(const MatrixView& w, const Q8Activations& x, float* y, int64_t r0, int64_t r1);
bool CpuHasAvx512Vnni();

void QuantizeActivationsQ8Scalar(const float* x, int64_t t0, int64_t t1, Q8Activations* a);
void QuantizeActivationsQ8Avx512(const float* x, int64_t t0, int64_t t1, Q8Activations* a);

}  // namespace gk
