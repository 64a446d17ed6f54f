// AVX-512 BF16 MatMul over packed weights (layout: kernels/packed_bf16.h).
//
// Micro-kernel: MR ≤ 6 tokens × NR ≤ 4 panels (64 output rows) of f32 accumulators, 24 of the
// 32 zmm registers. Per pair of input columns it loads NR weight vectors and broadcasts MR
// activation pairs: 24 vdpbf16ps (64 FLOPs each) per 4 + 6 loads.
// Blocking: input pairs in slices of 128 (256 columns), so a 4-panel weight block
// (4 × 128 × 64 B = 32 KiB) stays in L1/L2 while every token block streams past it; the
// activations (T × 256 columns × 2 B, 256 KiB at T = 512) stay in L2. Decode (T = 1) walks
// each panel once from start to end: four sequential streams per thread.
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>

#include "kernels/matmul.h"

#define GK_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace gk {
namespace {

// With `lo` (split activations), each activation is hi + lo in two bf16 and both products
// accumulate: f32-accurate results for twice the dot-product instructions.
template <int MR, int NR, bool kSplit>
GK_BF16 void Micro(const uint16_t* w, int64_t panel_stride, const uint32_t* x, const uint32_t* lo, int64_t ldx,
                   int64_t j0, int64_t j1, float* y, int64_t ldy, bool accumulate) {
  // Few tokens (decode): the lo products get their own accumulators, halving the dependency
  // chains that otherwise bound a weight-streaming loop.
  constexpr bool kSeparateLo = kSplit && MR * NR <= 12;
  __m512 acc[MR][NR], acc_lo[MR][NR];
#pragma GCC unroll 6
  for (int m = 0; m < MR; ++m)
#pragma GCC unroll 4
    for (int n = 0; n < NR; ++n) acc[m][n] = acc_lo[m][n] = _mm512_setzero_ps();
  for (int64_t j = j0; j < j1; ++j) {
    __m512bh wv[NR];
#pragma GCC unroll 4
    for (int n = 0; n < NR; ++n) wv[n] = (__m512bh)_mm512_loadu_si512(w + n * panel_stride + j * 32);
#pragma GCC unroll 6
    for (int m = 0; m < MR; ++m) {
      const __m512bh xb = (__m512bh)_mm512_set1_epi32(int(x[m * ldx + j]));
#pragma GCC unroll 4
      for (int n = 0; n < NR; ++n) acc[m][n] = _mm512_dpbf16_ps(acc[m][n], wv[n], xb);
      if constexpr (kSplit) {
        const __m512bh xl = (__m512bh)_mm512_set1_epi32(int(lo[m * ldx + j]));
#pragma GCC unroll 4
        for (int n = 0; n < NR; ++n) {
          if constexpr (kSeparateLo) {
            acc_lo[m][n] = _mm512_dpbf16_ps(acc_lo[m][n], wv[n], xl);
          } else {
            acc[m][n] = _mm512_dpbf16_ps(acc[m][n], wv[n], xl);
          }
        }
      }
    }
  }
#pragma GCC unroll 6
  for (int m = 0; m < MR; ++m) {
#pragma GCC unroll 4
    for (int n = 0; n < NR; ++n) {
      if constexpr (kSeparateLo) acc[m][n] = _mm512_add_ps(acc[m][n], acc_lo[m][n]);
      float* out = y + m * ldy + n * 16;
      _mm512_storeu_ps(out, accumulate ? _mm512_add_ps(_mm512_loadu_ps(out), acc[m][n]) : acc[m][n]);
    }
  }
}

using MicroFn = void (*)(const uint16_t*, int64_t, const uint32_t*, const uint32_t*, int64_t, int64_t, int64_t,
                         float*, int64_t, bool);

template <int MR, bool kSplit>
MicroFn PickNr(int nr) {
  switch (nr) {
    case 1: return &Micro<MR, 1, kSplit>;
    case 2: return &Micro<MR, 2, kSplit>;
    case 3: return &Micro<MR, 3, kSplit>;
    default: return &Micro<MR, 4, kSplit>;
  }
}

template <bool kSplit>
MicroFn PickMicro(int mr, int nr) {
  switch (mr) {
    case 1: return PickNr<1, kSplit>(nr);
    case 2: return PickNr<2, kSplit>(nr);
    case 3: return PickNr<3, kSplit>(nr);
    case 4: return PickNr<4, kSplit>(nr);
    case 5: return PickNr<5, kSplit>(nr);
    default: return PickNr<6, kSplit>(nr);
  }
}

}  // namespace

bool CpuHasAvx512Bf16() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
  }();
  return has;
}

void MatMulPackedAvx512Bf16(const MatrixView& w, const uint32_t* xp, const uint32_t* lo, int64_t T, float* y,
                            int64_t p0, int64_t p1) {
  const int64_t pairs = w.cols / 2, R = w.rows, panel_stride = pairs * 32;
  const uint16_t* wd = static_cast<const uint16_t*>(w.data);
  constexpr int64_t kMr = 6, kNr = 4;
  const int64_t kc = T == 1 ? pairs : 128;
  for (int64_t j0 = 0; j0 < pairs; j0 += kc) {
    const int64_t j1 = std::min(pairs, j0 + kc);
    for (int64_t p = p0; p < p1; p += kNr) {
      const int nr = int(std::min<int64_t>(kNr, p1 - p));
      for (int64_t t = 0; t < T; t += kMr) {
        const int mr = int(std::min<int64_t>(kMr, T - t));
        const MicroFn fn = lo ? PickMicro<true>(mr, nr) : PickMicro<false>(mr, nr);
        fn(wd + p * panel_stride, panel_stride, xp + t * pairs, lo ? lo + t * pairs : nullptr, pairs, j0, j1,
           y + t * R + p * 16, R, j0 > 0);
      }
    }
  }
}

}  // namespace gk
