#include "kernels/matmul_q8.h"

#include <algorithm>

#include "kernels/isa.h"

namespace gk {
namespace {

using Q8Fn = void (*)(const MatrixView&, const Q8Activations&, float*, int64_t, int64_t);
using QuantFn = void (*)(const float*, int64_t, int64_t, Q8Activations*);

Q8Fn ActiveQ8Fn() {
  switch (ActiveIsa()) {
    case Isa::kAvx512: return CpuHasAvx512Vnni() ? &MatMulQ8Avx512Vnni : &MatMulQ8Avx2;
    case Isa::kAvx2: return &MatMulQ8Avx2;
    case Isa::kScalar: break;
  }
  return &MatMulQ8Scalar;
}

QuantFn ActiveQuantFn() {
  return ActiveIsa() == Isa::kAvx512 ? &QuantizeActivationsQ8Avx512 : &QuantizeActivationsQ8Scalar;
}

// One buffer per calling thread (the engine thread, or a pool worker running MatMulRows),
// grown to the largest call and then reused.
Q8Activations& ThreadActivations() {
  thread_local Q8Activations a;
  return a;
}

}  // namespace

void Q8Activations::Resize(int64_t T, int64_t C) {
  tokens = T;
  cols = C;
  const size_t words = size_t(T * C / 4), blocks = size_t(T * C / kQ8BlockCols);
  if (q.size() < words) q.resize(words);
  if (d.size() < blocks) d.resize(blocks);
  if (corr.size() < blocks) corr.resize(blocks);
}

void QuantizeActivationsQ8(const float* x, int64_t t0, int64_t t1, Q8Activations* a) {
  ActiveQuantFn()(x, t0, t1, a);
}

void MatMulRowsQ8(const MatrixView& w, const float* x, int64_t T, float* y, int64_t r0, int64_t r1) {
  Q8Activations& a = ThreadActivations();
  a.Resize(T, w.cols);
  QuantizeActivationsQ8(x, 0, T, &a);
  ActiveQ8Fn()(w, a, y, r0, r1);
}

void MatMulQ8(const MatrixView& w, const float* x, int64_t T, float* y, ThreadPool& pool) {
  Q8Activations& a = ThreadActivations();
  a.Resize(T, w.cols);
  if (T > 8) {
    pool.ParallelFor(T, [&](int64_t t0, int64_t t1, int) { QuantizeActivationsQ8(x, t0, t1, &a); });
  } else {
    QuantizeActivationsQ8(x, 0, T, &a);
  }
  const Q8Fn fn = ActiveQ8Fn();
  // Whole panels per thread, so threads never share a cache line of y.
  pool.ParallelFor(Q8Panels(w.rows), [&](int64_t p0, int64_t p1, int) {
    fn(w, a, y, p0 * kQ8PanelRows, std::min(w.rows, p1 * kQ8PanelRows));
  });
}

}  // namespace gk
