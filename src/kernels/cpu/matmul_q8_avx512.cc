// AVX-512 VNNI MatMul over Q8_0 weights (layout above MatrixView in tensor/matrix.h).
//
// vpdpbusd multiplies 64 unsigned bytes by 64 signed bytes and adds each group of four
// products into one int32 lane. One 64-byte weight vector holds 16 rows × 4 columns, so with
// the four matching activation codes broadcast, lane i accumulates row i: a block of 32
// columns is 8 instructions, after which the 16 rows' exact block sums are converted to f32
// once and scaled by d_w (16 f16 scales, one vector) × d_x.
// The weights are the unsigned operand, stored as q + 128; the bias adds 128 · Σ q_x to every
// lane, which the accumulator cancels by starting at corr = -128 · Σ q_x (per token and block,
// computed with the activations).
// Blocking: one panel (16 rows) × up to 8 tokens; a block's 8 weight vectors stay in registers
// for all 8 tokens. Tokens go in groups whose int8 codes fit in L2 (≤ 256 KiB); within a group
// each pair of panels (≤ 34 × cols bytes) is reused from L1/L2 by every 8-token block.
// Decode (T ≤ 2) walks two panels side by side, once: two sequential streams and twice the
// independent work per thread, which one core needs to approach its share of the bandwidth.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>

#include "kernels/matmul_q8.h"

#define GK_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")))

namespace gk {
namespace {

// y[t · ldy + r] for TB tokens and the rows r in [r0, r1) of panels [p0, p1), NR panels at a
// time; x points at the first token's codes (xq), scales (xd) and offsets (xc).
template <int NR, int TB>
GK_VNNI void Micro(const uint8_t* base, int64_t C, int64_t p0, int64_t p1, const int32_t* xq, const float* xd,
                   const int32_t* xc, float* y, int64_t ldy, int64_t r0, int64_t r1) {
  const int64_t nb = C / kQ8BlockCols, ldq = C / 4, stride = Q8PanelBytes(C);
  for (int64_t p = p0; p < p1; p += NR) {
    __m512 acc[NR][TB];
#pragma GCC unroll 2
    for (int n = 0; n < NR; ++n)
#pragma GCC unroll 8
      for (int t = 0; t < TB; ++t) acc[n][t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
#pragma GCC unroll 2
      for (int n = 0; n < NR; ++n) {
        const uint8_t* panel = base + (p + n) * stride;
        const uint8_t* wb = panel + b * 512;
        __m512i wv[8];
#pragma GCC unroll 8
        for (int g = 0; g < 8; ++g) wv[g] = _mm512_load_si512(wb + 64 * g);
        const __m512 ws = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(panel + 16 * C + b * 32)));
#pragma GCC unroll 8
        for (int t = 0; t < TB; ++t) {
          const int32_t* xw = xq + t * ldq + b * 8;
          // Two chains of four so a single token does not wait on one long dependency.
          __m512i a0 = _mm512_set1_epi32(xc[t * nb + b]);
          __m512i a1 = _mm512_setzero_si512();
#pragma GCC unroll 4
          for (int g = 0; g < 8; g += 2) {
            a0 = _mm512_dpbusd_epi32(a0, wv[g], _mm512_set1_epi32(xw[g]));
            a1 = _mm512_dpbusd_epi32(a1, wv[g + 1], _mm512_set1_epi32(xw[g + 1]));
          }
          const __m512 s = _mm512_mul_ps(ws, _mm512_set1_ps(xd[t * nb + b]));
          acc[n][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(a0, a1)), s, acc[n][t]);
        }
      }
    }
#pragma GCC unroll 2
    for (int n = 0; n < NR; ++n) {
      const int64_t row0 = (p + n) * 16;
      const int64_t lo = std::max<int64_t>(0, r0 - row0), hi = std::min<int64_t>(16, r1 - row0);
      const __mmask16 m = __mmask16(((1u << hi) - 1) & ~((1u << lo) - 1));  // rows in [r0, r1)
#pragma GCC unroll 8
      for (int t = 0; t < TB; ++t) _mm512_mask_storeu_ps(y + t * ldy + row0, m, acc[n][t]);
    }
  }
}

using MicroFn = void (*)(const uint8_t*, int64_t, int64_t, int64_t, const int32_t*, const float*, const int32_t*,
                         float*, int64_t, int64_t, int64_t);

MicroFn PickMicro(int nr, int tb) {
  if (nr == 2) return tb == 1 ? &Micro<2, 1> : &Micro<2, 2>;
  switch (tb) {
    case 1: return &Micro<1, 1>;
    case 2: return &Micro<1, 2>;
    case 3: return &Micro<1, 3>;
    case 4: return &Micro<1, 4>;
    case 5: return &Micro<1, 5>;
    case 6: return &Micro<1, 6>;
    case 7: return &Micro<1, 7>;
    default: return &Micro<1, 8>;
  }
}

}  // namespace

bool CpuHasAvx512Vnni() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  }();
  return has;
}

void MatMulQ8Avx512Vnni(const MatrixView& w, const Q8Activations& x, float* y, int64_t r0, int64_t r1) {
  const int64_t C = w.cols, R = w.rows, T = x.tokens, nb = C / kQ8BlockCols;
  const uint8_t* base = static_cast<const uint8_t*>(w.data);
  const int64_t pa = r0 / 16, pb = (r1 + 15) / 16;
  // Panels [p0, p1) for tokens [t, t + tb). Up to 2 tokens, panels go in pairs (and an odd
  // last one alone): two streams per thread for decode. More tokens fill the registers with
  // one panel's accumulators (2 panels × 8 tokens would spill).
  auto run = [&](int64_t p0, int64_t p1, int64_t t, int tb) {
    const int32_t* xq = x.q.data() + t * (C / 4);
    const float* xd = x.d.data() + t * nb;
    const int32_t* xc = x.corr.data() + t * nb;
    const int64_t pe = tb <= 2 ? p0 + (p1 - p0) / 2 * 2 : p0;
    if (p0 < pe) PickMicro(2, tb)(base, C, p0, pe, xq, xd, xc, y + t * R, R, r0, r1);
    if (pe < p1) PickMicro(1, tb)(base, C, pe, p1, xq, xd, xc, y + t * R, R, r0, r1);
  };
  if (T <= 2) {  // decode: one pass over the panels
    run(pa, pb, 0, int(T));
    return;
  }
  const int64_t group = std::clamp<int64_t>((256 << 10) / C / 8 * 8, 8, 64);
  for (int64_t tg = 0; tg < T; tg += group) {
    const int64_t tge = std::min(T, tg + group);
    for (int64_t p = pa; p < pb; p += 2) {
      for (int64_t t = tg; t < tge; t += 8) run(p, std::min(pb, p + 2), t, int(std::min<int64_t>(8, tge - t)));
    }
  }
}

GK_VNNI void QuantizeActivationsQ8Avx512(const float* x, int64_t t0, int64_t t1, Q8Activations* a) {
  const int64_t C = a->cols, nb = C / kQ8BlockCols;
  for (int64_t t = t0; t < t1; ++t) {
    int8_t* q = reinterpret_cast<int8_t*>(a->q.data() + t * (C / 4));
    for (int64_t b = 0; b < nb; ++b) {
      const float* xb = x + t * C + b * kQ8BlockCols;
      const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
      const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
      const float d = amax / 127.f;
      const __m512 id = _mm512_set1_ps(d > 0.f ? 1.f / d : 0.f);
      // Round to nearest even, as std::nearbyint in the default rounding mode.
      const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, id));
      const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, id));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + b * 32), _mm512_cvtsepi32_epi8(q0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + b * 32 + 16), _mm512_cvtsepi32_epi8(q1));
      a->d[size_t(t * nb + b)] = d;
      a->corr[size_t(t * nb + b)] = -128 * _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    }
  }
}

}  // namespace gk
