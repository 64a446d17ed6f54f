// The scalar reference for the Q8_0 MatMul and the activation quantizer: plain loops over the
// layout, the oracle the SIMD paths are tested against (same integer sums, same scaling).
#include <algorithm>
#include <cmath>

#include "kernels/matmul_q8.h"

namespace gk {

void QuantizeActivationsQ8Scalar(const float* x, int64_t t0, int64_t t1, Q8Activations* a) {
  const int64_t C = a->cols, nb = C / kQ8BlockCols;
  for (int64_t t = t0; t < t1; ++t) {
    int8_t* q = reinterpret_cast<int8_t*>(a->q.data() + t * (C / 4));
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = x + t * C + b * kQ8BlockCols;
      float amax = 0.f;
      for (int i = 0; i < kQ8BlockCols; ++i) amax = std::max(amax, std::fabs(xb[i]));
      const float d = amax / 127.f;
      const float id = d > 0.f ? 1.f / d : 0.f;
      int32_t sum = 0;
      for (int i = 0; i < kQ8BlockCols; ++i) {
        // Round to nearest even (as the SIMD paths): adding 1.5 · 2²³ leaves no fraction bits.
        const int v = int((xb[i] * id + 12582912.f) - 12582912.f);
        q[b * kQ8BlockCols + i] = int8_t(v);
        sum += v;
      }
      a->d[size_t(t * nb + b)] = d;
      a->corr[size_t(t * nb + b)] = -128 * sum;
    }
  }
}

void MatMulQ8Scalar(const MatrixView& w, const Q8Activations& x, float* y, int64_t r0, int64_t r1) {
  const int64_t C = w.cols, nb = C / kQ8BlockCols, R = w.rows;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t* panel = static_cast<const uint8_t*>(w.data) + (r / 16) * Q8PanelBytes(C);
    const uint8_t* codes = panel + (r % 16) * 4;
    const uint16_t* scales = reinterpret_cast<const uint16_t*>(panel + 16 * C) + r % 16;
    for (int64_t t = 0; t < x.tokens; ++t) {
      const int8_t* xq = x.codes(t);
      float acc = 0.f;
      for (int64_t b = 0; b < nb; ++b) {
        int32_t dot = 0;
        for (int64_t c = b * kQ8BlockCols; c < (b + 1) * kQ8BlockCols; ++c) {
          dot += (int32_t(codes[(c / 4) * 64 + c % 4]) - 128) * int32_t(xq[c]);
        }
        acc += float(dot) * (F16ToF32(scales[b * 16]) * x.d[size_t(t * nb + b)]);
      }
      y[t * R + r] = acc;
    }
  }
}

}  // namespace gk
