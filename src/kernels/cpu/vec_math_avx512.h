// Float32 elementary functions on 16 lanes (AVX-512), shared by the AVX-512 kernels.
// Exp: Cephes' expf range reduction (x = n·ln2 + r, |r| ≤ ln2/2, ln2 split in two so n·ln2
// is exact) and its degree-6 polynomial, scaled by 2^n with vscalefps (handles overflow to
// inf and gradual underflow); ≤ 1 ulp on [-87, 88]. Tanh: Cephes' tanhf, an odd polynomial
// for |x| < 0.625 and 1 − 2/(e^{2|x|} + 1) above; ≤ 2 ulp.
// Include only from files compiled with these functions' target (the kernels are).
#pragma once

// GCC 12 warns about an intentionally undefined register inside its own AVX-512 headers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#ifndef GK_AVX512
#define GK_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
#endif

namespace gk {
namespace avx512 {

GK_AVX512 inline __m512 Exp(__m512 x) {
  const __m512 xc = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-103.f)), _mm512_set1_ps(88.8f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.f)));
  const __m512 y = _mm512_scalef_ps(p, n);
  // Below -103 the true value is 0 in float (and exp(-inf) must be 0, not a denormal).
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(-103.f), _CMP_GE_OQ), y);
}

GK_AVX512 inline __m512 Tanh(__m512 x) {
  const __m512 sign = _mm512_set1_ps(-0.f);
  const __m512 z = _mm512_andnot_ps(sign, x);
  // |x| ≥ 0.625: 1 − 2 / (e^{2|x|} + 1), sign restored.
  const __m512 e = Exp(_mm512_add_ps(z, z));
  const __m512 big = _mm512_sub_ps(_mm512_set1_ps(1.f),
                                   _mm512_div_ps(_mm512_set1_ps(2.f), _mm512_add_ps(e, _mm512_set1_ps(1.f))));
  const __m512 big_signed = _mm512_or_ps(big, _mm512_and_ps(sign, x));
  // |x| < 0.625: x + x·x²·P(x²).
  const __m512 z2 = _mm512_mul_ps(x, x);
  __m512 p = _mm512_set1_ps(-5.70498872745e-3f);
  p = _mm512_fmadd_ps(p, z2, _mm512_set1_ps(2.06390887954e-2f));
  p = _mm512_fmadd_ps(p, z2, _mm512_set1_ps(-5.37397155531e-2f));
  p = _mm512_fmadd_ps(p, z2, _mm512_set1_ps(1.33314422036e-1f));
  p = _mm512_fmadd_ps(p, z2, _mm512_set1_ps(-3.33332819422e-1f));
  const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, z2), x, x);
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(z, _mm512_set1_ps(0.625f), _CMP_LT_OQ), big_signed, small);
}

// Lane i of the result = sum of the 16 lanes of v[i] (a transposed reduction tree: 45
// shuffles/adds for 16 sums instead of 16 separate horizontal sums).
GK_AVX512 inline __m512 Reduce16(const __m512* in) {
  // The tree below leaves sum(v[k + 4m]) in lane 4k + m; feeding v[k + 4m] = in[4k + m]
  // puts sum(in[i]) in lane i.
  __m512 v[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) v[(i % 4) * 4 + i / 4] = in[i];
  __m512 w[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  __m512 x[4];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    x[i] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  }
  __m512 y[2];
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) {
    y[i] = _mm512_add_ps(_mm512_unpacklo_ps(x[2 * i], x[2 * i + 1]), _mm512_unpackhi_ps(x[2 * i], x[2 * i + 1]));
  }
  const __m512d a = _mm512_castps_pd(y[0]), b = _mm512_castps_pd(y[1]);
  return _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
}

}  // namespace avx512
}  // namespace gk
