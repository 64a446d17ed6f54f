#include "kernels/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <vector>

namespace gk {

void Sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              blasint(M), blasint(N), blasint(K), alpha, A, blasint(lda), B, blasint(ldb), beta, C,
              blasint(ldc));
}

void SetGemmThreads(int threads) { openblas_set_num_threads(std::max(1, threads)); }

void EnsureGemmThreads(int threads) {
  if (openblas_get_num_threads() != std::max(1, threads)) SetGemmThreads(threads);
}

namespace {

// Rows of W widened per panel: at most ~8 MiB of f32, so the panel stays in the last-level
// cache while sgemm reads it T/row-block times.
int64_t PanelRows(const MatrixView& w) {
  return std::max<int64_t>(16, std::min<int64_t>(w.rows, (int64_t(2) << 20) / std::max<int64_t>(1, w.cols)));
}

// Rows [r0, r1) of W as f32, row-major, into panel.
void WidenRows(const MatrixView& w, int64_t r0, int64_t r1, float* panel, ThreadPool& pool) {
  pool.ParallelFor(r1 - r0, [&](int64_t b, int64_t e, int) {
    for (int64_t r = b; r < e; ++r) w.RowToF32(r0 + r, panel + r * w.cols);
  });
}

// Rows of W per panel when each thread widens its own: ~4 MiB of f32. sgemm packs the
// activations once per call, so larger panels pack them fewer times; measured with
// BM_MatMulRoute (docs/PERF.md), 128-row panels ran ~20 % slower than 512-row ones.
int64_t ThreadPanelRows(const MatrixView& w) {
  return std::max<int64_t>(16, (int64_t(1) << 20) / std::max<int64_t>(1, w.cols) / 16 * 16);
}

std::vector<float>& PanelScratch(size_t n) {
  static thread_local std::vector<float> panel;
  if (panel.size() < n) panel.resize(n);
  return panel;
}

}  // namespace

void WeightMatMulRows(const MatrixView& w, const float* x, int64_t T, float* y, int64_t r0, int64_t r1) {
  if (w.dtype == DType::kF32 && !w.packed) {
    Sgemm(false, true, T, r1 - r0, w.cols, 1.f, x, w.cols, static_cast<const float*>(w.data) + r0 * w.cols, w.cols,
          0.f, y + r0, w.rows);
    return;
  }
  const int64_t pr = ThreadPanelRows(w);
  std::vector<float>& panel = PanelScratch(size_t(pr * w.cols));
  for (int64_t p0 = r0; p0 < r1; p0 += pr) {
    const int64_t p1 = std::min(r1, p0 + pr);
    for (int64_t r = p0; r < p1; ++r) w.RowToF32(r, panel.data() + (r - p0) * w.cols);
    Sgemm(false, true, T, p1 - p0, w.cols, 1.f, x, w.cols, panel.data(), w.cols, 0.f, y + p0, w.rows);
  }
}

void WeightMatMul(const MatrixView& w, const float* x, int64_t T, float* y, bool accumulate, ThreadPool& pool) {
  EnsureGemmThreads(pool.size());
  const float beta = accumulate ? 1.f : 0.f;
  if (w.dtype == DType::kF32 && !w.packed) {
    Sgemm(false, true, T, w.rows, w.cols, 1.f, x, w.cols, static_cast<const float*>(w.data), w.cols, beta, y, w.rows);
    return;
  }
  const int64_t pr = PanelRows(w);
  std::vector<float>& panel = PanelScratch(size_t(pr * w.cols));
  for (int64_t r0 = 0; r0 < w.rows; r0 += pr) {
    const int64_t r1 = std::min(w.rows, r0 + pr);
    WidenRows(w, r0, r1, panel.data(), pool);
    Sgemm(false, true, T, r1 - r0, w.cols, 1.f, x, w.cols, panel.data(), w.cols, beta, y + r0, w.rows);
  }
}

void WeightMatMulT(const MatrixView& w, const float* dy, int64_t T, float* dx, bool accumulate, ThreadPool& pool) {
  EnsureGemmThreads(pool.size());
  if (w.dtype == DType::kF32 && !w.packed) {
    Sgemm(false, false, T, w.cols, w.rows, 1.f, dy, w.rows, static_cast<const float*>(w.data), w.cols,
          accumulate ? 1.f : 0.f, dx, w.cols);
    return;
  }
  const int64_t pr = PanelRows(w);
  std::vector<float>& panel = PanelScratch(size_t(pr * w.cols));
  for (int64_t r0 = 0; r0 < w.rows; r0 += pr) {
    const int64_t r1 = std::min(w.rows, r0 + pr);
    WidenRows(w, r0, r1, panel.data(), pool);
    // dx += dy[:, r0:r1] · W[r0:r1, :]
    Sgemm(false, false, T, w.cols, r1 - r0, 1.f, dy + r0, w.rows, panel.data(), w.cols,
          (accumulate || r0 > 0) ? 1.f : 0.f, dx, w.cols);
  }
}

}  // namespace gk
