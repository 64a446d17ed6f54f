// Float32 elementary functions on 8 lanes (AVX2 + FMA), shared by the AVX2 kernels.
// Exp: Cephes expf (as vec_math_avx512.h) with 2^n built in the exponent bits; arguments below
// -87.3 (results in the denormal range) give 0, above 88.3 give e^88.3. Tanh: Cephes' tanhf,
// an odd polynomial for |x| < 0.625 and 1 − 2/(e^{2|x|} + 1) above.
// Include only from files compiled with these functions' target (the kernels are).
#pragma once

#include <immintrin.h>

#ifndef GK_AVX2
#define GK_AVX2 __attribute__((target("avx2,fma,f16c")))
#endif

namespace gk {
namespace avx2 {

GK_AVX2 inline __m256 Exp(__m256 x) {
  const __m256 xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(xc, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), xc);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  return _mm256_and_ps(y, _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_GE_OQ));
}

GK_AVX2 inline __m256 Tanh(__m256 x) {
  const __m256 sign = _mm256_set1_ps(-0.f);
  const __m256 z = _mm256_andnot_ps(sign, x);
  const __m256 e = Exp(_mm256_add_ps(z, z));
  const __m256 big = _mm256_sub_ps(_mm256_set1_ps(1.f),
                                   _mm256_div_ps(_mm256_set1_ps(2.f), _mm256_add_ps(e, _mm256_set1_ps(1.f))));
  const __m256 big_signed = _mm256_or_ps(big, _mm256_and_ps(sign, x));
  const __m256 z2 = _mm256_mul_ps(x, x);
  __m256 p = _mm256_set1_ps(-5.70498872745e-3f);
  p = _mm256_fmadd_ps(p, z2, _mm256_set1_ps(2.06390887954e-2f));
  p = _mm256_fmadd_ps(p, z2, _mm256_set1_ps(-5.37397155531e-2f));
  p = _mm256_fmadd_ps(p, z2, _mm256_set1_ps(1.33314422036e-1f));
  p = _mm256_fmadd_ps(p, z2, _mm256_set1_ps(-3.33332819422e-1f));
  const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, z2), x, x);
  return _mm256_blendv_ps(big_signed, small, _mm256_cmp_ps(z, _mm256_set1_ps(0.625f), _CMP_LT_OQ));
}

// Sum of the 8 lanes.
GK_AVX2 inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace avx2
}  // namespace gk
