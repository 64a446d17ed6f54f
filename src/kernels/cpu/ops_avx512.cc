// AVX-512 versions of the row operations in kernels/ops.h, same contracts and the same
// order of floating-point operations where it matters for agreement with the scalar code:
// RmsNorm sums squares in double (8 lanes, then one reduction) and scales as (x·inv)·w;
// softmax sums in double too;
// tanh and exp come from vec_math_avx512.h (≤ 2 ulp). GELU uses the identity
// 0.5·x·(1 + tanh u) = x / (1 + e^{-2u}), which also avoids the cancellation of 1 + tanh u
// for negative x. Tails are handled with masked loads and stores.
#include <cmath>

#include "kernels/cpu/vec_math_avx512.h"
#include "kernels/ops.h"

namespace gk {
namespace {

inline __mmask16 TailMask(int64_t left) { return left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1); }

}  // namespace

GK_AVX512 void RmsNormAvx512(const float* x, const float* w, int64_t n, float eps, float* y) {
  __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
  for (int64_t i = 0; i < n; i += 16) {
    const __m512 v = _mm512_maskz_loadu_ps(TailMask(n - i), x + i);
    const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
    const __m512d hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1));
    a0 = _mm512_fmadd_pd(lo, lo, a0);
    a1 = _mm512_fmadd_pd(hi, hi, a1);
  }
  const double ss = _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
  const __m512 inv = _mm512_set1_ps(float(1.0 / std::sqrt(ss / double(n) + double(eps))));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    __m512 r = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv);
    if (w) r = _mm512_mul_ps(r, _mm512_maskz_loadu_ps(m, w + i));
    _mm512_mask_storeu_ps(y + i, m, r);
  }
}

GK_AVX512 void GeluTanhMulAvx512(const float* gate, const float* up, int64_t n, float* out) {
  const __m512 c = _mm512_set1_ps(0.7978845608028654f), k = _mm512_set1_ps(0.044715f);
  const __m512 minus_two = _mm512_set1_ps(-2.f), one = _mm512_set1_ps(1.f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    const __m512 x = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(k, x), x), x);
    const __m512 u = _mm512_mul_ps(c, _mm512_add_ps(x, x3));
    const __m512 g = _mm512_div_ps(x, _mm512_add_ps(one, avx512::Exp(_mm512_mul_ps(minus_two, u))));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(g, _mm512_maskz_loadu_ps(m, up + i)));
  }
}

GK_AVX512 void SoftcapAvx512(float* x, int64_t n, float cap) {
  const __m512 inv = _mm512_set1_ps(1.f / cap), c = _mm512_set1_ps(cap);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(c, avx512::Tanh(_mm512_mul_ps(v, inv))));
  }
}

GK_AVX512 void SoftmaxInPlaceAvx512(float* x, int64_t n) {
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  __m512 mx = neg_inf;
  for (int64_t i = 0; i < n; i += 16) mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(neg_inf, TailMask(n - i), x + i));
  const __m512 mb = _mm512_set1_ps(_mm512_reduce_max_ps(mx));
  __m512d s0 = _mm512_setzero_pd(), s1 = _mm512_setzero_pd();  // double: rows reach 262144
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    const __m512 e = _mm512_maskz_mov_ps(m, avx512::Exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), mb)));
    _mm512_mask_storeu_ps(x + i, m, e);
    s0 = _mm512_add_pd(s0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    s1 = _mm512_add_pd(s1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1)));
  }
  const __m512 inv = _mm512_set1_ps(float(1.0 / _mm512_reduce_add_pd(_mm512_add_pd(s0, s1))));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inv));
  }
}

GK_AVX512 float DotAvx512(const float* a, const float* b, int64_t n) {
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
    s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
    s2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(b + i + 32), s2);
    s3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(b + i + 48), s3);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    s0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s0);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
}

GK_AVX512 void AxpyAvx512(float a, const float* x, float* y, int64_t n) {
  const __m512 av = _mm512_set1_ps(a);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
  }
}

GK_AVX512 void ScaleAvx512(float* x, int64_t n, float s) {
  const __m512 sv = _mm512_set1_ps(s);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), sv));
  }
}

GK_AVX512 void AddAvx512(const float* a, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, y + i), _mm512_maskz_loadu_ps(m, a + i)));
  }
}

}  // namespace gk
