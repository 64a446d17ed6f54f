// AVX2 attention kernel: the AVX-512 kernel's structure (see attention_avx512.cc) on 8 lanes
// and 16 registers: score tiles of G heads × 8/G positions (≤ 8 accumulators, one Reduce8),
// p·V slices of 8·C columns (C = 1 for G > 4, else 2). Prefetches as in the AVX-512 kernel:
// while a score tile runs, its V rows and the K rows kKAhead ahead, one line per row every 64
// bytes of columns; while p·V runs, the next block's K rows. Without them p·V walks each V block
// column slice by column slice and waits on the first touch of every line (the kernel read
// 0.3–0.5 of the bandwidth, docs/PERF.md). FP8 rows widen through f16 (F16C).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attention.h"
#include "kernels/cpu/vec_math_avx2.h"

namespace gk {
namespace {

using avx2::Exp;

constexpr int kBlock = 64;

// Lane i = sum of the 8 lanes of in[i].
GK_AVX2 inline __m256 Reduce8(const __m256* in) {
  const __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(in[0], in[1]), _mm256_hadd_ps(in[2], in[3]));
  const __m256 b = _mm256_hadd_ps(_mm256_hadd_ps(in[4], in[5]), _mm256_hadd_ps(in[6], in[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31));
}

GK_AVX2 inline float HSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

GK_AVX2 inline float HMax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Element types: Load widens 8 elements to f32 lanes holding the value divided by kScale (the
// caller folds kScale into the score scale and the finished output, outside the inner loops).
struct F32Kv {
  using T = float;
  static constexpr float kScale = 1.f;
  GK_AVX2 static inline __m256 Load(const float* p) { return _mm256_loadu_ps(p); }
};

struct Bf16Kv {
  using T = uint16_t;
  static constexpr float kScale = 1.f;
  GK_AVX2 static inline __m256 Load(const uint16_t* p) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
  }
};

struct F16Kv {
  using T = uint16_t;
  static constexpr float kScale = 1.f;
  GK_AVX2 static inline __m256 Load(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
};

// FP8 E5M2 is the high byte of an f16.
struct Fp8E5m2Kv {
  using T = uint8_t;
  static constexpr float kScale = 1.f;
  GK_AVX2 static inline __m256 Load(const uint8_t* p) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    return _mm256_cvtph_ps(_mm_unpacklo_epi8(_mm_setzero_si128(), b));
  }
};

// FP8 E4M3FN: exponent and mantissa (bits 0..6) at f16 bits 7..13, the sign at bit 15, make an
// f16 of value / 256, exactly, subnormals included (the NaN codes never occur: KV writes
// saturate). Sign-extending to 16 bits and shifting left by 7 puts the sign at bits 14 and 15;
// the mask clears bit 14.
struct Fp8E4m3Kv {
  using T = uint8_t;
  static constexpr float kScale = 256.f;
  GK_AVX2 static inline __m256 Load(const uint8_t* p) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    const __m128i h = _mm_and_si128(_mm_slli_epi16(_mm_cvtepi8_epi16(b), 7), _mm_set1_epi16(int16_t(0xbfff)));
    return _mm256_cvtph_ps(h);
  }
};

constexpr int kKAhead = 8;  // K rows are prefetched this many rows ahead of the score tile

inline void Prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }

// s[g * kBlock + j] = scale · q_g · k_j for j < nb, prefetching the tile's V rows and the K rows
// kKAhead ahead (`avail`: rows left in the segment from k on).
template <class KV, int G>
GK_AVX2 void BlockScores(const float* q, int64_t q_stride, const typename KV::T* k, const typename KV::T* v,
                         int64_t stride, int nb, int H, float scale, float* s, int64_t avail) {
  constexpr int J = 8 / G;
  constexpr int kLine = 64 / int(sizeof(typename KV::T));  // elements per cache line
  alignas(32) float tmp[8];
  for (int j0 = 0; j0 < nb; j0 += J) {
    const typename KV::T* rows[J];
    const typename KV::T* kahead[J];
    const typename KV::T* vrows[J];
#pragma GCC unroll 8
    for (int j = 0; j < J; ++j) {
      rows[j] = k + int64_t(std::min(j0 + j, nb - 1)) * stride;
      kahead[j] = k + std::min<int64_t>(j0 + kKAhead + j, avail - 1) * stride;
      vrows[j] = v + int64_t(std::min(j0 + j, nb - 1)) * stride;
    }
    __m256 acc[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) acc[i] = _mm256_setzero_ps();
    for (int d = 0; d < H; d += 8) {
      if (d % kLine == 0) {
#pragma GCC unroll 8
        for (int j = 0; j < J; ++j) Prefetch(vrows[j] + d);
#pragma GCC unroll 8
        for (int j = 0; j < J; ++j) Prefetch(kahead[j] + d);
      }
      __m256 kv[J];
#pragma GCC unroll 8
      for (int j = 0; j < J; ++j) kv[j] = KV::Load(rows[j] + d);
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) {
        const __m256 qv = _mm256_loadu_ps(q + g * q_stride + d);
#pragma GCC unroll 8
        for (int j = 0; j < J; ++j) acc[g * J + j] = _mm256_fmadd_ps(qv, kv[j], acc[g * J + j]);
      }
    }
    _mm256_store_ps(tmp, _mm256_mul_ps(Reduce8(acc), _mm256_set1_ps(scale)));
    const int valid = std::min(J, nb - j0);
    for (int g = 0; g < G; ++g) {
      for (int j = 0; j < valid; ++j) s[g * kBlock + j0 + j] = tmp[g * J + j];
    }
  }
}

// o[g][d0, d0 + 8·C) += Σ_j p[g][j] · v_j[d0, ...); prefetches the line at d0 of the next
// block's K rows (knext, nnext rows) when d0 starts a line.
template <class KV, int G, int C>
GK_AVX2 void BlockPv(const float* p, const typename KV::T* v, int64_t stride, int nb, int d0, float* o,
                     int64_t o_stride, const typename KV::T* knext, int nnext) {
  const bool line_start = (int64_t(d0) * int64_t(sizeof(typename KV::T))) % 64 == 0;
  __m256 acc[G][C];
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 2
    for (int c = 0; c < C; ++c) acc[g][c] = _mm256_loadu_ps(o + g * o_stride + d0 + 8 * c);
  for (int j = 0; j < nb; ++j) {
    const typename KV::T* row = v + int64_t(j) * stride + d0;
    __m256 vv[C];
#pragma GCC unroll 2
    for (int c = 0; c < C; ++c) vv[c] = KV::Load(row + 8 * c);
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      const __m256 pb = _mm256_broadcast_ss(p + g * kBlock + j);
#pragma GCC unroll 2
      for (int c = 0; c < C; ++c) acc[g][c] = _mm256_fmadd_ps(pb, vv[c], acc[g][c]);
    }
    if (line_start && j < nnext) Prefetch(knext + int64_t(j) * stride + d0);
  }
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 2
    for (int c = 0; c < C; ++c) _mm256_storeu_ps(o + g * o_stride + d0 + 8 * c, acc[g][c]);
}

GK_AVX2 inline void SoftmaxBlock(float* s, int nb, float* m, float* l, float* o, int H) {
  float bm = -INFINITY;
  for (int j = 0; j < nb; ++j) bm = std::max(bm, s[j]);
  if (bm > *m) {
    if (*m != -INFINITY) {
      const float alpha = std::exp(*m - bm);
      *l *= alpha;
      const __m256 a = _mm256_set1_ps(alpha);
      for (int i = 0; i < H; i += 8) _mm256_storeu_ps(o + i, _mm256_mul_ps(a, _mm256_loadu_ps(o + i)));
    }
    *m = bm;
  }
  const __m256 mb = _mm256_set1_ps(*m);
  __m256 sum = _mm256_setzero_ps();
  int j = 0;
  for (; j + 8 <= nb; j += 8) {
    const __m256 e = Exp(_mm256_sub_ps(_mm256_loadu_ps(s + j), mb));
    _mm256_storeu_ps(s + j, e);
    sum = _mm256_add_ps(sum, e);
  }
  float tail = 0.f;
  if (j < nb) {
    alignas(32) float t[8];
    for (int i = 0; i < 8; ++i) t[i] = j + i < nb ? s[j + i] : -INFINITY;
    _mm256_store_ps(t, Exp(_mm256_sub_ps(_mm256_load_ps(t), mb)));
    for (int i = 0; j + i < nb; ++i) {
      s[j + i] = t[i];
      tail += t[i];
    }
  }
  *l += HSum(sum) + tail;
}

template <class KV, int G>
GK_AVX2 void Partial(const AttentionQuery& q, std::span<const KvSegment> segments, int64_t begin, int64_t end,
                     float* m, float* l, float* o, int64_t o_stride) {
  constexpr int C = G > 4 ? 1 : 2;
  const int H = q.head_dim;
  alignas(32) float s[G * kBlock];
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.f;
    std::memset(o + g * o_stride, 0, sizeof(float) * size_t(H));
  }
  int64_t base = 0;
  for (const KvSegment& seg : segments) {
    const int64_t lo = std::max(begin, base) - base, hi = std::min(end, base + seg.len) - base;
    base += seg.len;
    const auto* kseg = static_cast<const typename KV::T*>(seg.k);
    const auto* vseg = static_cast<const typename KV::T*>(seg.v);
    for (int64_t j = lo; j < hi; j += kBlock) {
      const int nb = int(std::min<int64_t>(kBlock, hi - j));
      const int nnext = int(std::min<int64_t>(kBlock, hi - j - nb));
      const typename KV::T* k = kseg + j * seg.stride;
      const typename KV::T* v = vseg + j * seg.stride;
      const typename KV::T* knext = k + int64_t(nb) * seg.stride;
      BlockScores<KV, G>(q.q, q.q_stride, k, v, seg.stride, nb, H, q.scale * KV::kScale, s, hi - j);
      for (int g = 0; g < G; ++g) SoftmaxBlock(s + g * kBlock, nb, m + g, l + g, o + g * o_stride, H);
      int d0 = 0;
      for (; d0 + 8 * C <= H; d0 += 8 * C) BlockPv<KV, G, C>(s, v, seg.stride, nb, d0, o, o_stride, knext, nnext);
      for (; d0 < H; d0 += 8) BlockPv<KV, G, 1>(s, v, seg.stride, nb, d0, o, o_stride, knext, nnext);
    }
  }
  if constexpr (KV::kScale != 1.f) {  // V rows were read as value / kScale
    const __m256 sc = _mm256_set1_ps(KV::kScale);
    for (int g = 0; g < G; ++g) {
      float* row = o + g * o_stride;
      for (int i = 0; i < H; i += 8) _mm256_storeu_ps(row + i, _mm256_mul_ps(sc, _mm256_loadu_ps(row + i)));
    }
  }
}

template <class KV>
void PartialGroups(const AttentionQuery& q, std::span<const KvSegment> segments, int64_t begin, int64_t end,
                   const AttentionPartial& part) {
  for (int g0 = 0; g0 < q.group; g0 += 8) {
    AttentionQuery sub = q;
    sub.q = q.q + g0 * q.q_stride;
    float* m = part.m + g0;
    float* l = part.l + g0;
    float* o = part.o + g0 * part.o_stride;
    const int64_t os = part.o_stride;
    switch (std::min(8, q.group - g0)) {
      case 1: Partial<KV, 1>(sub, segments, begin, end, m, l, o, os); break;
      case 2: Partial<KV, 2>(sub, segments, begin, end, m, l, o, os); break;
      case 3: Partial<KV, 3>(sub, segments, begin, end, m, l, o, os); break;
      case 4: Partial<KV, 4>(sub, segments, begin, end, m, l, o, os); break;
      case 5: Partial<KV, 5>(sub, segments, begin, end, m, l, o, os); break;
      case 6: Partial<KV, 6>(sub, segments, begin, end, m, l, o, os); break;
      case 7: Partial<KV, 7>(sub, segments, begin, end, m, l, o, os); break;
      default: Partial<KV, 8>(sub, segments, begin, end, m, l, o, os); break;
    }
  }
}

}  // namespace

void AttendHeadsPartialAvx2(const AttentionQuery& q, std::span<const KvSegment> segments, int64_t begin,
                            int64_t end, const AttentionPartial& part) {
  // F16C comes with every AVX2 CPU we know of, but the ISA check does not promise it.
  static const bool f16c = __builtin_cpu_supports("f16c");
  const bool widens_f16 =
      q.kv_dtype == DType::kF16 || q.kv_dtype == DType::kFp8E4m3 || q.kv_dtype == DType::kFp8E5m2;
  if (q.head_dim % 8 != 0 || (widens_f16 && !f16c)) {
    return AttendHeadsPartialScalar(q, segments, begin, end, part);
  }
  switch (q.kv_dtype) {
    case DType::kBF16: return PartialGroups<Bf16Kv>(q, segments, begin, end, part);
    case DType::kF16: return PartialGroups<F16Kv>(q, segments, begin, end, part);
    case DType::kFp8E4m3: return PartialGroups<Fp8E4m3Kv>(q, segments, begin, end, part);
    case DType::kFp8E5m2: return PartialGroups<Fp8E5m2Kv>(q, segments, begin, end, part);
    default: return PartialGroups<F32Kv>(q, segments, begin, end, part);
  }
}

}  // namespace gk
