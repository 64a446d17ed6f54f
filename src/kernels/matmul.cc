#include "kernels/matmul.h"

#include "kernels/isa.h"

namespace gk {

namespace {

using RowsFn = void (*)(const MatrixView&, const float*, int64_t, float*, int64_t, int64_t);

RowsFn ActiveRowsFn() {
  switch (ActiveIsa()) {
    case Isa::kAvx512: return &MatMulRowsAvx512;
    case Isa::kAvx2: return &MatMulRowsAvx2;
    case Isa::kScalar: break;
  }
  return &MatMulRowsScalar;
}

}  // namespace

void MatMulRows(const MatrixView& w, const float* x, int64_t T, float* y, int64_t r0, int64_t r1) {
  ActiveRowsFn()(w, x, T, y, r0, r1);
}

void MatMul(const MatrixView& w, const float* x, int64_t T, float* y, ThreadPool& pool) {
  const RowsFn rows_fn = ActiveRowsFn();
  // Split rows in blocks of 16 so threads never share a cache line of y.
  const int64_t blocks = (w.rows + 15) / 16;
  pool.ParallelFor(blocks, [&](int64_t b0, int64_t b1, int) {
    rows_fn(w, x, T, y, b0 * 16, std::min(w.rows, b1 * 16));
  });
}

}  // namespace gk
