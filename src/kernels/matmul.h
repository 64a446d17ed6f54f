// Matrix products against weight matrices in their storage dtype (f32 or bf16).
//   y (T × rows) = x (T × cols) · Wᵀ      x: row stride cols, y: row stride rows.
// Decode is T = 1 (a matrix-vector product, bound by streaming W once); prefill and batched
// decode are T > 1 and reuse each loaded weight tile across tokens.
// Threads take contiguous row ranges so each core streams its own part of W sequentially.
#pragma once

#include <cstdint>
#include <span>

#include "tensor/matrix.h"
#include "tensor/thread_pool.h"

namespace gk {

void MatMul(const MatrixView& w, const float* x, int64_t T, float* y, ThreadPool& pool);

// One product of MatMulShared: y = x · wᵀ.
struct WeightProduct {
  const MatrixView* w = nullptr;
  float* y = nullptr;
};

// Several products of the same activations by matrices of the same width (Q, K, V; gate, up).
// Packed bf16 weights go in one parallel loop over all their panels, with x converted once:
// a decode step runs hundreds of parallel loops and each ends waiting for the slower thread.
// The results equal MatMul's for each matrix, bit for bit. Other layouts run MatMul in turn.
void MatMulShared(std::span<const WeightProduct> products, const float* x, int64_t T, ThreadPool& pool);

// Prefill (T >= BlasMinTokens(), 64 by default on CPUs without AVX-512) with row-major f32/bf16
// weights goes through OpenBLAS's sgemm on panels widened to f32 (kernels/gemm.h), one
// single-threaded sgemm per pool thread on its own rows: on AVX2 it ran ~1.4× our
// register-blocked kernel at T = 512 (docs/PERF.md). Packed bf16 (AVX-512 BF16) and Q8_0
// weights keep their own kernels. GEMMAKIT_BLAS_MIN_TOKENS=N sets the threshold (0: never),
// SetBlasMinTokens too (tests, benchmarks).
int64_t BlasMinTokens();
int64_t BlasMinTokensDefault();  // from the environment, else the built-in threshold
void SetBlasMinTokens(int64_t tokens);

// Single-threaded, on the calling thread (for callers that parallelise over something else).
void MatMulRows(const MatrixView& w, const float* x, int64_t T, float* y, int64_t r0, int64_t r1);

// Single-threaded kernels over rows [r0, r1), one per instruction set; same contract.
void MatMulRowsScalar(const MatrixView& w, const float* x, int64_t T, float* y, int64_t r0, int64_t r1);
void MatMulRowsAvx2(const MatrixView& w, const float* x, int64_t T, float* y, int64_t r0, int64_t r1);
void MatMulRowsAvx512(const MatrixView& w, const float* x, int64_t T, float* y, int64_t r0, int64_t r1);

// How activations meet packed bf16 weights in the dot-product kernels:
//   kSplit  x = hi + lo, two bf16 each, both multiplied: f32-accurate products (the library's
//           default; what the PyTorch oracle's tolerance needs), twice the dot-product instructions
//   kRound  x rounded to one bf16, as a bf16 PyTorch or vLLM model computes: half the
//           instructions, ~2^-9 relative rounding per activation (the commands' default,
//           cli/common.h's EngineFlags)
// Decode is bound by reading the weights, so the split costs it nothing measurable; prefill
// is bound by the instructions. GEMMAKIT_BF16_ACTIVATIONS=round|split sets the default.
enum class Bf16Activations { kSplit, kRound };
Bf16Activations ActiveBf16Activations();
void SetBf16Activations(Bf16Activations mode);
// Sets the mode for one scope and restores the previous one after (a pass that needs its own
// without changing it for the rest of the process).
class ScopedBf16Activations {
 public:
  explicit ScopedBf16Activations(Bf16Activations mode) : was_(ActiveBf16Activations()) { SetBf16Activations(mode); }
  ~ScopedBf16Activations() { SetBf16Activations(was_); }
  ScopedBf16Activations(const ScopedBf16Activations&) = delete;
  ScopedBf16Activations& operator=(const ScopedBf16Activations&) = delete;

 private:
  Bf16Activations was_;
};

// Packed bf16 weights (kernels/packed_bf16.h) over panels [p0, p1): x is given as bf16 pairs,
// T rows of cols/2 uint32 (each the two bf16 of columns 2j and 2j+1, low half first); lo is
// null (kRound) or the pairs of the rounding remainders (kSplit).
void MatMulPackedScalar(const MatrixView& w, const uint32_t* xp, const uint32_t* lo, int64_t T, float* y,
                        int64_t p0, int64_t p1);
void MatMulPackedAvx512Bf16(const MatrixView& w, const uint32_t* xp, const uint32_t* lo, int64_t T, float* y,
                            int64_t p0, int64_t p1);
bool CpuHasAvx512Bf16();

}  // namespace gk
