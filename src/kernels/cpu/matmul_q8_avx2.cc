// AVX2 MatMul over Q8_0 weights (layout above MatrixView in tensor/matrix.h), for CPUs without
// AVX-512 VNNI. A 64-byte weight vector of the layout (16 rows × 4 columns) is two ymm halves
// of 8 rows. vpmaddubsw needs an unsigned operand and saturates at 16 bits, so the codes are
// made signed again (xor 0x80) and the sign of x moved onto them: |x| · (sign(x) · q) pairs
// stay below 2 · 127² < 2¹⁵; vpmaddwd with ones then sums each row's four products.
// Blocking: one panel × one token at a time, tokens in L2-sized groups as in the AVX-512
// kernel, so a panel is reused from cache by every token of the group.
#include <immintrin.h>

#include <algorithm>

#include "kernels/matmul_q8.h"

#define GK_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace gk {
namespace {

// out[0..15] = the panel's 16 rows · one token.
GK_AVX2 void PanelToken(const uint8_t* panel, int64_t C, const int32_t* xw, const float* xd, float* out) {
  const int64_t nb = C / kQ8BlockCols;
  const uint16_t* scales = reinterpret_cast<const uint16_t*>(panel + 16 * C);
  const __m256i bias = _mm256_set1_epi8(char(0x80));
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc_lo = _mm256_setzero_ps(), acc_hi = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* wb = panel + b * 512;
    __m256i lo = _mm256_setzero_si256(), hi = _mm256_setzero_si256();
    for (int g = 0; g < 8; ++g) {
      const __m256i xv = _mm256_set1_epi32(xw[b * 8 + g]);
      const __m256i ax = _mm256_abs_epi8(xv);
      const __m256i w0 = _mm256_xor_si256(_mm256_load_si256(reinterpret_cast<const __m256i*>(wb + 64 * g)), bias);
      const __m256i w1 = _mm256_xor_si256(_mm256_load_si256(reinterpret_cast<const __m256i*>(wb + 64 * g + 32)), bias);
      lo = _mm256_add_epi32(lo, _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(w0, xv)), ones));
      hi = _mm256_add_epi32(hi, _mm256_madd_epi16(_mm256_maddubs_epi16(ax, _mm256_sign_epi8(w1, xv)), ones));
    }
    const __m256 dx = _mm256_set1_ps(xd[b]);
    const __m128i* s16 = reinterpret_cast<const __m128i*>(scales + b * 16);
    const __m256 s_lo = _mm256_mul_ps(_mm256_cvtph_ps(_mm_load_si128(s16)), dx);
    const __m256 s_hi = _mm256_mul_ps(_mm256_cvtph_ps(_mm_load_si128(s16 + 1)), dx);
    acc_lo = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lo), s_lo, acc_lo);
    acc_hi = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hi), s_hi, acc_hi);
  }
  _mm256_storeu_ps(out, acc_lo);
  _mm256_storeu_ps(out + 8, acc_hi);
}

}  // namespace

void MatMulQ8Avx2(const MatrixView& w, const Q8Activations& x, float* y, int64_t r0, int64_t r1) {
  const int64_t C = w.cols, R = w.rows, T = x.tokens, nb = C / kQ8BlockCols;
  const uint8_t* base = static_cast<const uint8_t*>(w.data);
  const int64_t group = std::clamp<int64_t>((256 << 10) / C, 1, 64);
  float out[16];
  for (int64_t tg = 0; tg < T; tg += group) {
    const int64_t tge = std::min(T, tg + group);
    for (int64_t p = r0 / 16; p * 16 < r1; ++p) {
      const uint8_t* panel = base + p * Q8PanelBytes(C);
      const int64_t lo = std::max<int64_t>(0, r0 - p * 16), hi = std::min<int64_t>(16, r1 - p * 16);
      for (int64_t t = tg; t < tge; ++t) {
        PanelToken(panel, C, x.q.data() + t * (C / 4), x.d.data() + t * nb, out);
        std::copy(out + lo, out + hi, y + t * R + p * 16 + lo);
      }
    }
  }
}

}  // namespace gk
