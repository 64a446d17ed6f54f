// AVX-512 MatMul. Blocking: tokens in groups of 64 and columns in slices of 1024, so the
// x tile (64 × 1024 × 4 B = 256 KiB) stays in L2 while 4-row weight strips stream through;
// the micro-kernel keeps a 4 rows × 4 tokens block of accumulators (16 zmm) and converts
// each bf16 weight vector to f32 once for 4 tokens. Decode (T ≤ 4) uses the whole row.
// GCC 12 warns about an intentionally undefined register inside its own AVX-512 headers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>

#include "kernels/matmul.h"

#define GK_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))

namespace gk {
namespace {

struct F32W {
  using T = float;
  GK_AVX512 static inline __m512 Load(const float* p) { return _mm512_loadu_ps(p); }
  GK_AVX512 static inline __m512 LoadMask(const float* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
};

struct Bf16W {
  using T = uint16_t;
  GK_AVX512 static inline __m512 Widen(__m256i v) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
  }
  GK_AVX512 static inline __m512 Load(const uint16_t* p) {
    return Widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  GK_AVX512 static inline __m512 LoadMask(const uint16_t* p, __mmask16 m) {
    return Widen(_mm256_maskz_loadu_epi16(m, p));
  }
};

// out[r * TB + t] = dot(w row r, x row t) over columns [c0, c1).
template <class W, int RB, int TB>
GK_AVX512 void Micro(const typename W::T* w, int64_t ldw, const float* x, int64_t ldx, int64_t c0,
                     int64_t c1, float* out) {
  __m512 acc[RB][TB];
#pragma GCC unroll 4
  for (int r = 0; r < RB; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < TB; ++t) acc[r][t] = _mm512_setzero_ps();
  int64_t c = c0;
  for (; c + 16 <= c1; c += 16) {
    __m512 xv[TB];
#pragma GCC unroll 4
    for (int t = 0; t < TB; ++t) xv[t] = _mm512_loadu_ps(x + t * ldx + c);
#pragma GCC unroll 4
    for (int r = 0; r < RB; ++r) {
      const __m512 wv = W::Load(w + r * ldw + c);
#pragma GCC unroll 4
      for (int t = 0; t < TB; ++t) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
    }
  }
  if (c < c1) {
    const __mmask16 m = __mmask16((1u << (c1 - c)) - 1);
    __m512 xv[TB];
#pragma GCC unroll 4
    for (int t = 0; t < TB; ++t) xv[t] = _mm512_maskz_loadu_ps(m, x + t * ldx + c);
#pragma GCC unroll 4
    for (int r = 0; r < RB; ++r) {
      const __m512 wv = W::LoadMask(w + r * ldw + c, m);
#pragma GCC unroll 4
      for (int t = 0; t < TB; ++t) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < RB; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < TB; ++t) out[r * TB + t] = _mm512_reduce_add_ps(acc[r][t]);
}

template <class W>
using MicroFn = void (*)(const typename W::T*, int64_t, const float*, int64_t, int64_t, int64_t, float*);

template <class W, int RB>
constexpr MicroFn<W> Pick(int tb) {
  switch (tb) {
    case 1: return &Micro<W, RB, 1>;
    case 2: return &Micro<W, RB, 2>;
    case 3: return &Micro<W, RB, 3>;
    default: return &Micro<W, RB, 4>;
  }
}

template <class W>
MicroFn<W> PickMicro(int rb, int tb) {
  switch (rb) {
    case 1: return Pick<W, 1>(tb);
    case 2: return Pick<W, 2>(tb);
    case 3: return Pick<W, 3>(tb);
    default: return Pick<W, 4>(tb);
  }
}

template <class W>
void Rows(const MatrixView& mv, const float* x, int64_t T, float* y, int64_t r0, int64_t r1) {
  const int64_t C = mv.cols, R = mv.rows;
  const auto* wd = static_cast<const typename W::T*>(mv.data);
  constexpr int64_t kTokenGroup = 64;
  const int64_t kc = T <= 4 ? C : 1024;
  float out[16];
  for (int64_t tg = 0; tg < T; tg += kTokenGroup) {
    const int64_t tge = std::min(T, tg + kTokenGroup);
    for (int64_t c0 = 0; c0 < C; c0 += kc) {
      const int64_t c1 = std::min(C, c0 + kc);
      for (int64_t r = r0; r < r1; r += 4) {
        const int rb = int(std::min<int64_t>(4, r1 - r));
        for (int64_t t = tg; t < tge; t += 4) {
          const int tb = int(std::min<int64_t>(4, tge - t));
          PickMicro<W>(rb, tb)(wd + r * C, C, x + t * C, C, c0, c1, out);
          for (int i = 0; i < rb; ++i) {
            for (int j = 0; j < tb; ++j) {
              float& dst = y[(t + j) * R + r + i];
              dst = (c0 == 0 ? 0.f : dst) + out[i * tb + j];
            }
          }
        }
      }
    }
  }
}

}  // namespace

void MatMulRowsAvx512(const MatrixView& w, const float* x, int64_t T, float* y, int64_t r0, int64_t r1) {
  if (w.dtype == DType::kBF16) {
    Rows<Bf16W>(w, x, T, y, r0, r1);
  } else {
    Rows<F32W>(w, x, T, y, r0, r1);
  }
}

}  // namespace gk
