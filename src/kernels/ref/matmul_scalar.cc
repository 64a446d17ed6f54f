// The scalar reference for MatMul: plain loops, the oracle the SIMD paths are tested against.
#include "kernels/matmul.h"

namespace gk {

void MatMulRowsScalar(const MatrixView& w, const float* x, int64_t T, float* y, int64_t r0, int64_t r1) {
  const int64_t C = w.cols;
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t t = 0; t < T; ++t) {
      const float* xt = x + t * C;
      float acc = 0.f;
      if (w.dtype == DType::kF32) {
        const float* wr = static_cast<const float*>(w.data) + r * C;
        for (int64_t c = 0; c < C; ++c) acc += wr[c] * xt[c];
      } else {
        const uint16_t* wr = static_cast<const uint16_t*>(w.data) + r * C;
        for (int64_t c = 0; c < C; ++c) acc += Bf16ToF32(wr[c]) * xt[c];
      }
      y[t * w.rows + r] = acc;
    }
  }
}

}  // namespace gk
