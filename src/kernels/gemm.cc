#include "kernels/gemm.h"

#include <cblas.h>
#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/isa.h"

namespace gk {

namespace {

std::atomic<int> g_gemm_threads{0};  // 0: OpenBLAS's own default

// Multi-threaded products go to oneDNN's sgemm on AVX-512 CPUs: its JIT kernels ran 290-390
// GFLOP/s on the trainer's shapes on the 2-core AVX-512 EPYC against 180-200 for Debian's
// OpenBLAS 0.3.21, which does not know that CPU and must be pinned there to its Haswell
// kernels (OPENBLAS_CORETYPE); unpinned, its SkylakeX kernels ran 320-350 (docs/PERF.md,
// "Zen 5"). Single-threaded calls (MatMul's prefill route, one per pool thread) stay with
// OpenBLAS: OpenMP teams started from several threads at once would oversubscribe the cores.
// GEMMAKIT_SGEMM=openblas|onednn overrides the choice.
std::atomic<int> g_forced_library{-2};  // -2: read GEMMAKIT_SGEMM; -1 auto, 0 OpenBLAS, 1 oneDNN

bool UseOnednn(int threads) {
  int forced = g_forced_library.load(std::memory_order_relaxed);
  if (forced == -2) {
    const char* e = std::getenv("GEMMAKIT_SGEMM");
    forced = e && std::strcmp(e, "openblas") == 0 ? 0 : e && std::strcmp(e, "onednn") == 0 ? 1 : -1;
    g_forced_library.store(forced);
  }
  if (threads <= 1 || forced == 0) return false;
  return forced == 1 || ActiveIsa() == Isa::kAvx512;
}

int GemmThreads() {
  const int t = g_gemm_threads.load(std::memory_order_relaxed);
  return t > 0 ? t : openblas_get_num_threads();
}

}  // namespace

void Sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  const int threads = GemmThreads();
  if (UseOnednn(threads)) {
    omp_set_num_threads(threads);  // this thread's next OpenMP team: oneDNN's threads
    if (dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) ==
        dnnl_success) {
      return;
    }
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              blasint(M), blasint(N), blasint(K), alpha, A, blasint(lda), B, blasint(ldb), beta, C,
              blasint(ldc));
}

void SgemmOneThread(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                    int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  omp_set_num_threads(1);  // inside a parallel region a nested team has one thread anyway
  if (dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc) ==
      dnnl_success) {
    return;
  }
  Sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);  // oneDNN refused the arguments
}

const char* SgemmLibrary(int threads) { return UseOnednn(threads) ? "oneDNN" : "OpenBLAS"; }

void ForceSgemmLibrary(int library) { g_forced_library.store(library < 0 ? -1 : library > 0 ? 1 : 0); }

void SetGemmThreads(int threads) {
  g_gemm_threads.store(std::max(1, threads));
  openblas_set_num_threads(std::max(1, threads));
}

void EnsureGemmThreads(int threads) {
  if (GemmThreads() != std::max(1, threads)) SetGemmThreads(threads);
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
