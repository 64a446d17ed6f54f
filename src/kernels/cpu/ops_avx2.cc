// AVX2 versions of RmsNorm, GeluTanhMul and SoftmaxInPlace (kernels/ops.h), with the contracts
// and order of operations of the AVX-512 ones (ops_avx512.cc): squares and softmax sums in
// double, (x·inv)·w; GELU as x / (1 + e^{-2u}), arranged so that no exponential overflows.
// Before them, prefill spent ~19 % of its time in the scalar GELU's tanhf/expm1f on AVX2
// machines (docs/PERF.md).
#include <algorithm>
#include <cmath>

#include "kernels/cpu/vec_math_avx2.h"
#include "kernels/ops.h"

namespace gk {

GK_AVX2 void RmsNormAvx2(const float* x, const float* w, int64_t n, float eps, float* y) {
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    a0 = _mm256_fmadd_pd(lo, lo, a0);
    a1 = _mm256_fmadd_pd(hi, hi, a1);
  }
  double lanes[4];
  _mm256_storeu_pd(lanes, _mm256_add_pd(a0, a1));
  double ss = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (int64_t j = i; j < n; ++j) ss += double(x[j]) * x[j];
  const float inv_s = float(1.0 / std::sqrt(ss / double(n) + double(eps)));
  const __m256 inv = _mm256_set1_ps(inv_s);
  for (i = 0; i + 8 <= n; i += 8) {
    __m256 r = _mm256_mul_ps(_mm256_loadu_ps(x + i), inv);
    if (w) r = _mm256_mul_ps(r, _mm256_loadu_ps(w + i));
    _mm256_storeu_ps(y + i, r);
  }
  for (; i < n; ++i) y[i] = w ? x[i] * inv_s * w[i] : x[i] * inv_s;
}

GK_AVX2 void GeluTanhMulAvx2(const float* gate, const float* up, int64_t n, float* out) {
  const __m256 c = _mm256_set1_ps(0.7978845608028654f), k = _mm256_set1_ps(0.044715f);
  const __m256 one = _mm256_set1_ps(1.f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(gate + i);
    const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(k, x), x), x);
    const __m256 u = _mm256_mul_ps(c, _mm256_add_ps(x, x3));
    // x / (1 + t) for u >= 0 and x·t / (1 + t) for u < 0, t = e^{-2|u|} = h·h with h = e^{-|u|}:
    // nothing overflows, and x·h·h keeps the small results that avx2::Exp (flushing below
    // e^-87.3) would lose.
    const __m256 h = avx2::Exp(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_andnot_ps(_mm256_set1_ps(-0.f), u)));
    const __m256 t = _mm256_mul_ps(h, h);
    const __m256 num = _mm256_blendv_ps(x, _mm256_mul_ps(_mm256_mul_ps(x, h), h), u);  // by u's sign bit
    const __m256 g = _mm256_div_ps(num, _mm256_add_ps(one, t));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(g, _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) {
    const float x = gate[i], u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    out[i] = x / (1.f + std::exp(-2.f * u)) * up[i];
  }
}

GK_AVX2 void SoftmaxInPlaceAvx2(float* x, int64_t n) {
  __m256 mx = _mm256_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(x + i));
  float lanes[8];
  _mm256_storeu_ps(lanes, mx);
  float m = lanes[0];
  for (float v : lanes) m = std::max(m, v);
  for (int64_t j = i; j < n; ++j) m = std::max(m, x[j]);
  const __m256 mb = _mm256_set1_ps(m);
  __m256d s0 = _mm256_setzero_pd(), s1 = _mm256_setzero_pd();  // double: rows reach 262144
  for (i = 0; i + 8 <= n; i += 8) {
    const __m256 e = avx2::Exp(_mm256_sub_ps(_mm256_loadu_ps(x + i), mb));
    _mm256_storeu_ps(x + i, e);
    s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  double d[4];
  _mm256_storeu_pd(d, _mm256_add_pd(s0, s1));
  double sum = (d[0] + d[1]) + (d[2] + d[3]);
  for (int64_t j = i; j < n; ++j) {
    x[j] = std::exp(x[j] - m);
    sum += x[j];
  }
  const float inv_s = float(1.0 / sum);
  const __m256 inv = _mm256_set1_ps(inv_s);
  for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
  for (; i < n; ++i) x[i] *= inv_s;
}

}  // namespace gk
