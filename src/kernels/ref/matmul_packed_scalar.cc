// Scalar reference for packed bf16 weights: the oracle of the dot-product kernel.
#include "kernels/matmul.h"

namespace gk {

void MatMulPackedScalar(const MatrixView& w, const uint32_t* xp, const uint32_t* lo, int64_t T, float* y,
                        int64_t p0, int64_t p1) {
  const int64_t pairs = w.cols / 2, R = w.rows;
  const uint16_t* wd = static_cast<const uint16_t*>(w.data);
  for (int64_t p = p0; p < p1; ++p) {
    for (int64_t t = 0; t < T; ++t) {
      float acc[16] = {};
      for (int64_t j = 0; j < pairs; ++j) {
        const uint32_t xv = xp[t * pairs + j], lv = lo ? lo[t * pairs + j] : 0;
        const float x0 = Bf16ToF32(uint16_t(xv & 0xffff)) + Bf16ToF32(uint16_t(lv & 0xffff));
        const float x1 = Bf16ToF32(uint16_t(xv >> 16)) + Bf16ToF32(uint16_t(lv >> 16));
        const uint16_t* v = wd + (p * pairs + j) * 32;
        for (int i = 0; i < 16; ++i) acc[i] += Bf16ToF32(v[2 * i]) * x0 + Bf16ToF32(v[2 * i + 1]) * x1;
      }
      for (int i = 0; i < 16; ++i) y[t * R + p * 16 + i] = acc[i];
    }
  }
}

}  // namespace gk
