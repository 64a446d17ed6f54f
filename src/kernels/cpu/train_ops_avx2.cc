// AVX2 versions of the loss head's row kernels, the GeGLU backward and Softcap
// (kernels/train_ops.h, ops.h).
#include <cmath>

#include "kernels/cpu/vec_math_avx2.h"
#include "kernels/ops.h"
#include "kernels/train_ops.h"

namespace gk {

GK_AVX2 void SoftcapAvx2(float* x, int64_t n, float cap) {
  const __m256 c = _mm256_set1_ps(cap), inv = _mm256_set1_ps(1.f / cap);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(x + i, _mm256_mul_ps(c, avx2::Tanh(_mm256_mul_ps(_mm256_loadu_ps(x + i), inv))));
  }
  for (; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

GK_AVX2 double SumExpMinusAvx2(const float* z, int64_t n, float m) {
  const __m256 mv = _mm256_set1_ps(m);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_add_ps(acc0, avx2::Exp(_mm256_sub_ps(_mm256_loadu_ps(z + i), mv)));
    acc1 = _mm256_add_ps(acc1, avx2::Exp(_mm256_sub_ps(_mm256_loadu_ps(z + i + 8), mv)));
  }
  double s = double(avx2::HorizontalSum(_mm256_add_ps(acc0, acc1)));
  for (; i < n; ++i) s += std::exp(double(z[i] - m));
  return s;
}

// Per lane the first of its largest values and its index (strictly greater replaces), then the
// smallest index among the lanes holding the largest: the scalar loop's first argmax. n ≥ 8.
GK_AVX2 float RowMaxArgAvx2(const float* z, int64_t n, int64_t* arg) {
  __m256 best = _mm256_loadu_ps(z);
  __m256i best_i = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), idx = best_i;
  const __m256i eight = _mm256_set1_epi32(8);
  int64_t i = 8;
  for (; i + 8 <= n; i += 8) {
    idx = _mm256_add_epi32(idx, eight);
    const __m256 v = _mm256_loadu_ps(z + i);
    const __m256 gt = _mm256_cmp_ps(v, best, _CMP_GT_OQ);
    best = _mm256_blendv_ps(best, v, gt);
    best_i = _mm256_blendv_epi8(best_i, idx, _mm256_castps_si256(gt));
  }
  alignas(32) float bv[8];
  alignas(32) int32_t bi[8];
  _mm256_store_ps(bv, best);
  _mm256_store_si256(reinterpret_cast<__m256i*>(bi), best_i);
  float m = bv[0];
  int64_t a = bi[0];
  for (int k = 1; k < 8; ++k) {
    if (bv[k] > m || (bv[k] == m && bi[k] < a)) m = bv[k], a = bi[k];
  }
  for (; i < n; ++i) {
    if (z[i] > m) m = z[i], a = i;
  }
  *arg = a;
  return m;
}

// SumExpMinusAvx2's sums (two accumulators over 16 logits a step) and CrossEntropyGradRowAvx2's
// values with lse = m, scale 1, no target, from one exp per logit.
GK_AVX2 double SumExpMinusAndGradRowAvx2(float* z, int64_t n, float m, float cap) {
  const __m256 mv = _mm256_set1_ps(m), one = _mm256_set1_ps(1.f);
  const __m256 inv = _mm256_set1_ps(cap > 0.f ? 1.f / cap : 0.f);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 v0 = _mm256_loadu_ps(z + i), v1 = _mm256_loadu_ps(z + i + 8);
    const __m256 e0 = avx2::Exp(_mm256_sub_ps(v0, mv)), e1 = avx2::Exp(_mm256_sub_ps(v1, mv));
    acc0 = _mm256_add_ps(acc0, e0);
    acc1 = _mm256_add_ps(acc1, e1);
    const __m256 t0 = _mm256_mul_ps(v0, inv), t1 = _mm256_mul_ps(v1, inv);
    _mm256_storeu_ps(z + i, _mm256_mul_ps(e0, _mm256_fnmadd_ps(t0, t0, one)));
    _mm256_storeu_ps(z + i + 8, _mm256_mul_ps(e1, _mm256_fnmadd_ps(t1, t1, one)));
  }
  double s = double(avx2::HorizontalSum(_mm256_add_ps(acc0, acc1)));
  for (int64_t j = i; j < n; ++j) s += std::exp(double(z[j] - m));
  CrossEntropyGradRowAvx2(z + i, n - i, m, -1, cap, 1.f);  // the tail: as the two calls
  return s;
}

GK_AVX2 void CrossEntropyGradRowAvx2(float* z, int64_t n, float lse, int64_t target, float cap, float scale) {
  const float zt = target >= 0 && target < n ? z[target] : 0.f;
  const __m256 l = _mm256_set1_ps(lse), sc = _mm256_set1_ps(scale), one = _mm256_set1_ps(1.f);
  const __m256 inv = _mm256_set1_ps(cap > 0.f ? 1.f / cap : 0.f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(z + i);
    const __m256 th = _mm256_mul_ps(v, inv);
    const __m256 d = _mm256_fnmadd_ps(th, th, one);  // 1 − tanh² of the pre-cap logit (1 without a cap)
    _mm256_storeu_ps(z + i, _mm256_mul_ps(_mm256_mul_ps(avx2::Exp(_mm256_sub_ps(v, l)), d), sc));
  }
  for (; i < n; ++i) {
    const float th = cap > 0.f ? z[i] / cap : 0.f;
    z[i] = std::exp(z[i] - lse) * (1.f - th * th) * scale;
  }
  if (target >= 0 && target < n) {
    const float th = cap > 0.f ? zt / cap : 0.f;
    z[target] -= (1.f - th * th) * scale;
  }
}

// tanh from vec_math_avx2.h (Cephes' tanhf) instead of libm's tanhf, whose expm1f was ~4 % of
// a training step's samples with the scalar loop around it ~2 % more (docs/PERF.md). Returns
// the elements done (whole vectors); the caller's scalar loop does the rest.
GK_AVX2 int64_t GeluTanhMulBackwardAvx2(const float* gate, const float* up, const float* dout, int64_t n,
                                        float* dgate, float* dup) {
  const __m256 c = _mm256_set1_ps(0.7978845608028654f), k = _mm256_set1_ps(0.044715f);
  const __m256 k3 = _mm256_set1_ps(3.f * 0.044715f), half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(gate + i), x2 = _mm256_mul_ps(x, x);
    const __m256 t = avx2::Tanh(_mm256_mul_ps(c, _mm256_add_ps(x, _mm256_mul_ps(_mm256_mul_ps(k, x), x2))));
    const __m256 one_t = _mm256_add_ps(one, t);
    const __m256 hx = _mm256_mul_ps(half, x);
    // gelu'(x) = ½(1 + t) + ½x(1 − t²)·c·(1 + 3k·x²)
    const __m256 d = _mm256_add_ps(_mm256_mul_ps(half, one_t),
                                   _mm256_mul_ps(_mm256_mul_ps(hx, _mm256_fnmadd_ps(t, t, one)),
                                                 _mm256_mul_ps(c, _mm256_fmadd_ps(k3, x2, one))));
    const __m256 g = _mm256_loadu_ps(dout + i);
    _mm256_storeu_ps(dgate + i, _mm256_mul_ps(_mm256_mul_ps(g, _mm256_loadu_ps(up + i)), d));
    _mm256_storeu_ps(dup + i, _mm256_mul_ps(g, _mm256_mul_ps(hx, one_t)));
  }
  return i;
}

}  // namespace gk
