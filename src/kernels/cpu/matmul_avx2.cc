// AVX2 + FMA MatMul for CPUs without AVX-512. With 16 ymm registers the micro-kernel holds
// 4 rows × 3 tokens of accumulators (plus 3 activations and one weight vector); one bf16 token
// (decode) uses DecodeRowsBf16, 8 rows straight from the weights with one instruction per 8
// weights to widen them; two tokens use 4 × 2. With three or more tokens, bf16
// weights are first widened to f32 one 4-row × 1024-column panel at a time (16 KiB, L1-resident)
// so that every token reuses the widened panel instead of widening each weight again: the
// widening (vpmovzxwd + vpslld) competes with the FMAs for the same ports.
#include <immintrin.h>

#include <algorithm>
#include <type_traits>
#include <vector>

#include "kernels/cpu/vec_math_avx2.h"
#include "kernels/matmul.h"

namespace gk {
namespace {

GK_AVX2 inline __m256 LoadW(const float* p) { return _mm256_loadu_ps(p); }
GK_AVX2 inline __m256 LoadW(const uint16_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
}
inline float ScalarW(const float* p) { return *p; }
inline float ScalarW(const uint16_t* p) { return Bf16ToF32(*p); }

template <class WT, int RB, int TB>
GK_AVX2 void Micro(const WT* w, int64_t ldw, const float* x, int64_t ldx, int64_t c0, int64_t c1, float* out) {
  __m256 acc[RB][TB];
#pragma GCC unroll 4
  for (int r = 0; r < RB; ++r)
#pragma GCC unroll 3
    for (int t = 0; t < TB; ++t) acc[r][t] = _mm256_setzero_ps();
  int64_t c = c0;
  for (; c + 8 <= c1; c += 8) {
    __m256 xv[TB];
#pragma GCC unroll 3
    for (int t = 0; t < TB; ++t) xv[t] = _mm256_loadu_ps(x + t * ldx + c);
#pragma GCC unroll 4
    for (int r = 0; r < RB; ++r) {
      const __m256 wv = LoadW(w + r * ldw + c);
#pragma GCC unroll 3
      for (int t = 0; t < TB; ++t) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
    }
  }
  for (int r = 0; r < RB; ++r) {
    for (int t = 0; t < TB; ++t) {
      float s = avx2::HorizontalSum(acc[r][t]);
      for (int64_t cc = c; cc < c1; ++cc) s += ScalarW(w + r * ldw + cc) * x[t * ldx + cc];
      out[r * TB + t] = s;
    }
  }
}

template <class WT>
using MicroFn = void (*)(const WT*, int64_t, const float*, int64_t, int64_t, int64_t, float*);

template <class WT>
MicroFn<WT> PickMicro(int rb, int tb) {
  static const MicroFn<WT> table[4][3] = {
      {&Micro<WT, 1, 1>, &Micro<WT, 1, 2>, &Micro<WT, 1, 3>},
      {&Micro<WT, 2, 1>, &Micro<WT, 2, 2>, &Micro<WT, 2, 3>},
      {&Micro<WT, 3, 1>, &Micro<WT, 3, 2>, &Micro<WT, 3, 3>},
      {&Micro<WT, 4, 1>, &Micro<WT, 4, 2>, &Micro<WT, 4, 3>}};
  return table[rb - 1][tb - 1];
}

constexpr int64_t kPanelCols = 1024;  // columns per block when several tokens share the weights

// Widens rows [0, rb) × columns [c0, c1) of bf16 W (row stride ldw) into panel (row stride
// kPanelCols).
GK_AVX2 void WidenPanel(const uint16_t* w, int64_t ldw, int rb, int64_t c0, int64_t c1, float* panel) {
  for (int r = 0; r < rb; ++r) {
    const uint16_t* src = w + r * ldw;
    float* dst = panel + r * kPanelCols - c0;
    int64_t c = c0;
    for (; c + 8 <= c1; c += 8) _mm256_storeu_ps(dst + c, LoadW(src + c));
    for (; c < c1; ++c) dst[c] = ScalarW(src + c);
  }
}

// Adds (or, for the first column block, stores) a micro-kernel's rb × tb results.
inline void Store(const float* out, int rb, int tb, bool first, float* y, int64_t R, int64_t r, int64_t t) {
  for (int i = 0; i < rb; ++i) {
    for (int j = 0; j < tb; ++j) {
      float& dst = y[(t + j) * R + r + i];
      dst = (first ? 0.f : dst) + out[i * tb + j];
    }
  }
}

template <class WT>
void Rows(const MatrixView& mv, const float* x, int64_t T, float* y, int64_t r0, int64_t r1) {
  const int64_t C = mv.cols, R = mv.rows;
  const WT* wd = static_cast<const WT*>(mv.data);
  constexpr int64_t kTokenGroup = 64;
  const int64_t kc = T <= 2 ? C : kPanelCols;
  const int tstep = T <= 2 ? 2 : 3;
  constexpr bool kWiden = !std::is_same_v<WT, float>;
  alignas(32) float panel[kWiden ? 4 * kPanelCols : 1];
  float out[12];
  for (int64_t tg = 0; tg < T; tg += kTokenGroup) {
    const int64_t tge = std::min(T, tg + kTokenGroup);
    for (int64_t c0 = 0; c0 < C; c0 += kc) {
      const int64_t c1 = std::min(C, c0 + kc);
      for (int64_t r = r0; r < r1; r += 4) {
        const int rb = int(std::min<int64_t>(4, r1 - r));
        if (kWiden && T > 2) {  // widen once, then every token reads f32 weights
          WidenPanel(reinterpret_cast<const uint16_t*>(wd + r * C), C, rb, c0, c1, panel);
          for (int64_t t = tg; t < tge; t += tstep) {
            const int tb = int(std::min<int64_t>(tstep, tge - t));
            PickMicro<float>(rb, tb)(panel, kPanelCols, x + t * C + c0, C, 0, c1 - c0, out);
            Store(out, rb, tb, c0 == 0, y, R, r, t);
          }
          continue;
        }
        for (int64_t t = tg; t < tge; t += tstep) {
          const int tb = int(std::min<int64_t>(tstep, tge - t));
          PickMicro<WT>(rb, tb)(wd + r * C, C, x + t * C, C, c0, c1, out);
          Store(out, rb, tb, c0 == 0, y, R, r, t);
        }
      }
    }
  }
}

// Decode (one token) over bf16 rows, 8 rows at a time. A 256-bit load holds 16 bf16; shifting
// each 32-bit lane left by 16 gives the even columns as f32, masking off its low half gives the
// odd ones: one instruction per 8 weights instead of two (vpmovzxwd + vpslld), against
// activations split once into even and odd halves of every 16 columns (xd).
GK_AVX2 void DeinterleaveEvenOdd(const float* x, int64_t n16, float* xd) {
  for (int64_t c = 0; c < n16; c += 16) {
    const __m256 a = _mm256_loadu_ps(x + c), b = _mm256_loadu_ps(x + c + 8);
    const __m256 even = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));  // x0 x2 x8 x10 | x4 x6 x12 x14
    const __m256 odd = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
    _mm256_storeu_ps(xd + c, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(even), 0xd8)));
    _mm256_storeu_ps(xd + c + 8, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(odd), 0xd8)));
  }
}

template <int RB>
GK_AVX2 void DecodeBf16Block(const uint16_t* w, int64_t C, const float* x, const float* xd, int64_t n16, float* y) {
  const __m256i high = _mm256_set1_epi32(int(0xffff0000u));
  __m256 acc[RB];
#pragma GCC unroll 8
  for (int r = 0; r < RB; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t c = 0; c < n16; c += 16) {
    const __m256 xe = _mm256_loadu_ps(xd + c), xo = _mm256_loadu_ps(xd + c + 8);
#pragma GCC unroll 8
    for (int r = 0; r < RB; ++r) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + r * C + c));
      acc[r] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v, 16)), xe, acc[r]);
      acc[r] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(v, high)), xo, acc[r]);
    }
  }
  for (int r = 0; r < RB; ++r) {
    float s = avx2::HorizontalSum(acc[r]);
    for (int64_t c = n16; c < C; ++c) s += Bf16ToF32(w[r * C + c]) * x[c];
    y[r] = s;
  }
}

void DecodeRowsBf16(const MatrixView& mv, const float* x, float* y, int64_t r0, int64_t r1) {
  const int64_t C = mv.cols, n16 = C / 16 * 16;
  thread_local std::vector<float> xd;
  if (int64_t(xd.size()) < n16) xd.resize(size_t(n16));
  DeinterleaveEvenOdd(x, n16, xd.data());
  const uint16_t* w = static_cast<const uint16_t*>(mv.data);
  int64_t r = r0;
  for (; r + 8 <= r1; r += 8) DecodeBf16Block<8>(w + r * C, C, x, xd.data(), n16, y + r);
  for (; r < r1; ++r) DecodeBf16Block<1>(w + r * C, C, x, xd.data(), n16, y + r);
}

}  // namespace

void MatMulRowsAvx2(const MatrixView& w, const float* x, int64_t T, float* y, int64_t r0, int64_t r1) {
  if (w.dtype == DType::kBF16 && T == 1) {
    DecodeRowsBf16(w, x, y, r0, r1);
  } else if (w.dtype == DType::kBF16) {
    Rows<uint16_t>(w, x, T, y, r0, r1);
  } else {
    Rows<float>(w, x, T, y, r0, r1);
  }
}

}  // namespace gk
