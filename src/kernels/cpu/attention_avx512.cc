// AVX-512 attention kernel (blocking and prefetching: see kernels/attention.h).
// Per block of up to 64 positions:
//   scores  a register tile of G heads × J positions (ScoreTile), accumulated over the head
//           dim in 16-lane vectors; one or two Reduce16 turn the tile into its dot products;
//   softmax running max per head, rescale of sum and output when it rises, exp in 16 lanes;
//   p·V     output columns in slices of 16·C (PvSlices) held in registers across the whole
//           block, so each output element is loaded and stored once per block.
// Prefetches: while a score tile runs, its V rows and the K rows 8 ahead, one line per row
// every 64 bytes of columns; while p·V runs, the next block's K rows (the slice matching the
// V slice being read). Without them a group of 8 reads its cache at half the rate (the FMAs
// leave too few loads in flight); bursts of whole rows instead cost 10-15 %.
// FP8 rows (E4M3FN, E5M2) widen through f16 (vcvtph2ps), as in the AVX2 kernel.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attention.h"
#include "kernels/cpu/vec_math_avx512.h"

namespace gk {
namespace {

using avx512::Exp;
using avx512::Reduce16;

constexpr int kBlock = 64;

// Element types: Load widens 16 elements to f32 lanes holding the value divided by kScale (the
// caller folds kScale into the score scale and the finished output, outside the inner loops).
struct F32Kv {
  using T = float;
  static constexpr float kScale = 1.f;
  GK_AVX512 static inline __m512 Load(const float* p) { return _mm512_loadu_ps(p); }
};

struct Bf16Kv {
  using T = uint16_t;
  static constexpr float kScale = 1.f;
  GK_AVX512 static inline __m512 Load(const uint16_t* p) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
  }
};

struct F16Kv {
  using T = uint16_t;
  static constexpr float kScale = 1.f;
  GK_AVX512 static inline __m512 Load(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
};

// FP8 E5M2 is the high byte of an f16.
struct Fp8E5m2Kv {
  using T = uint8_t;
  static constexpr float kScale = 1.f;
  GK_AVX512 static inline __m512 Load(const uint8_t* p) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(b), 8));
  }
};

// FP8 E4M3FN: exponent and mantissa (bits 0..6) at f16 bits 7..13, the sign at bit 15, make an
// f16 of value / 256, exactly, subnormals included (the NaN codes never occur: KV writes
// saturate). Sign-extending to 16 bits and shifting left by 7 puts the sign at bits 14 and 15;
// the mask clears bit 14.
struct Fp8E4m3Kv {
  using T = uint8_t;
  static constexpr float kScale = 256.f;
  GK_AVX512 static inline __m512 Load(const uint8_t* p) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m256i h =
        _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(b), 7), _mm256_set1_epi16(int16_t(0xbfff)));
    return _mm512_cvtph_ps(h);
  }
};

inline void PrefetchBytes(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t off = 0; off < bytes; off += 64) _mm_prefetch(c + off, _MM_HINT_T0);
}

// Register tiles: scores take G heads × J positions (≤ 24 accumulators; per 16 columns G + J
// loads feed G·J FMAs), p·V takes G heads × C column slices (≤ 24 accumulators; per position
// C loads and G broadcasts feed G·C FMAs). This core issues about one 512-bit load per cycle,
// so the loads per FMA, not the FMAs, bound the kernel once the group is large.
constexpr int ScoreTile(int g) { return g == 1 ? 16 : g == 2 ? 8 : g <= 4 ? 24 / g / 2 * 2 : 24 / g; }
constexpr int PvSlices(int g) { return g <= 4 ? 4 : 24 / g; }

// K rows are prefetched this many rows ahead of the score tile being computed.
constexpr int kKAhead = 8;

// s[g * kBlock + j] = scale · q_g · k_j for j < nb. Alongside, one cache line per row and
// 64 bytes of columns: the tile's V rows (for p·V) and the K rows kKAhead ahead, `avail`
// being the rows left in the segment from k on. Spreading the prefetches over the FMAs
// (rather than a burst per row) keeps the miss buffers free for the demand loads.
template <class KV, int G>
GK_AVX512 void BlockScores(const float* q, int64_t q_stride, const typename KV::T* k, const typename KV::T* v,
                           int64_t stride, int nb, int H, float scale, float* s, int64_t avail) {
  constexpr int J = ScoreTile(G), A = G * J;
  static_assert(A <= 24);
  const __m512 sv = _mm512_set1_ps(scale);
  alignas(64) float tmp[32];
  for (int j0 = 0; j0 < nb; j0 += J) {
    const typename KV::T* rows[J];
#pragma GCC unroll 16
    for (int j = 0; j < J; ++j) rows[j] = k + int64_t(std::min(j0 + j, nb - 1)) * stride;
    const typename KV::T* kahead[J];
#pragma GCC unroll 16
    for (int j = 0; j < J; ++j) kahead[j] = k + std::min<int64_t>(j0 + kKAhead + j, avail - 1) * stride;
    const typename KV::T* vrows[J];
#pragma GCC unroll 16
    for (int j = 0; j < J; ++j) vrows[j] = v + int64_t(std::min(j0 + j, nb - 1)) * stride;
    __m512 acc[32];
#pragma GCC unroll 32
    for (int i = 0; i < 32; ++i) acc[i] = _mm512_setzero_ps();
    constexpr int kLine = 64 / int(sizeof(typename KV::T));  // elements per cache line
    for (int d = 0; d < H; d += 16) {
      if (d % kLine == 0) {
#pragma GCC unroll 16
        for (int j = 0; j < J; ++j) _mm_prefetch(reinterpret_cast<const char*>(vrows[j] + d), _MM_HINT_T0);
        for (int j = 0; j < J; ++j) _mm_prefetch(reinterpret_cast<const char*>(kahead[j] + d), _MM_HINT_T0);
      }
      __m512 kv[J];
#pragma GCC unroll 16
      for (int j = 0; j < J; ++j) kv[j] = KV::Load(rows[j] + d);
#pragma GCC unroll 8
      for (int g = 0; g < G; ++g) {
        __m512 qv = _mm512_loadu_ps(q + g * q_stride + d);
        // Keep q in a register: folded into each FMA it would be loaded J times.
        asm("" : "+v"(qv));
#pragma GCC unroll 16
        for (int j = 0; j < J; ++j) acc[g * J + j] = _mm512_fmadd_ps(qv, kv[j], acc[g * J + j]);
      }
    }
    _mm512_store_ps(tmp, _mm512_mul_ps(Reduce16(acc), sv));
    if constexpr (A > 16) _mm512_store_ps(tmp + 16, _mm512_mul_ps(Reduce16(acc + 16), sv));
    const int valid = std::min(J, nb - j0);
    for (int g = 0; g < G; ++g) {
      for (int j = 0; j < valid; ++j) s[g * kBlock + j0 + j] = tmp[g * J + j];
    }
  }
}

// o[g][d0, d0 + 16·C) += Σ_j p[g][j] · v_j[d0, ...); prefetches the same bytes of the next
// block's K rows (knext, nnext rows).
template <class KV, int G, int C>
GK_AVX512 void BlockPv(const float* p, const typename KV::T* v, int64_t stride, int nb, int d0, float* o,
                       int64_t o_stride, const typename KV::T* knext, int nnext) {
  __m512 acc[G][C];
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc[g][c] = _mm512_loadu_ps(o + g * o_stride + d0 + 16 * c);
  constexpr int64_t kSliceBytes = 16 * C * int64_t(sizeof(typename KV::T));
  for (int j = 0; j < nb; ++j) {
    const typename KV::T* row = v + int64_t(j) * stride + d0;
    __m512 vv[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) vv[c] = KV::Load(row + 16 * c);
#pragma GCC unroll 8
    for (int g = 0; g < G; ++g) {
      const __m512 pb = _mm512_set1_ps(p[g * kBlock + j]);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[g][c] = _mm512_fmadd_ps(pb, vv[c], acc[g][c]);
    }
    if (j < nnext) PrefetchBytes(knext + int64_t(j) * stride + d0, kSliceBytes);
  }
#pragma GCC unroll 8
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(o + g * o_stride + d0 + 16 * c, acc[g][c]);
}

// Online softmax update of head g's state with the block's scores (replaced by exp weights).
GK_AVX512 inline void SoftmaxBlock(float* s, int nb, float* m, float* l, float* o, int H) {
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  __m512 mx = neg_inf;
  for (int j = 0; j < nb; j += 16) {
    const __mmask16 mask = nb - j >= 16 ? __mmask16(0xffff) : __mmask16((1u << (nb - j)) - 1);
    mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(neg_inf, mask, s + j));
  }
  const float bm = _mm512_reduce_max_ps(mx);
  if (bm > *m) {
    if (*m != -INFINITY) {  // rescale what the earlier blocks accumulated
      const float alpha = std::exp(*m - bm);
      *l *= alpha;
      const __m512 a = _mm512_set1_ps(alpha);
      for (int i = 0; i < H; i += 16) _mm512_storeu_ps(o + i, _mm512_mul_ps(a, _mm512_loadu_ps(o + i)));
    }
    *m = bm;
  }
  const __m512 mb = _mm512_set1_ps(*m);
  __m512 sum = _mm512_setzero_ps();
  for (int j = 0; j < nb; j += 16) {
    const __mmask16 mask = nb - j >= 16 ? __mmask16(0xffff) : __mmask16((1u << (nb - j)) - 1);
    const __m512 e = _mm512_maskz_mov_ps(mask, Exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, s + j), mb)));
    _mm512_mask_storeu_ps(s + j, mask, e);
    sum = _mm512_add_ps(sum, e);
  }
  *l += _mm512_reduce_add_ps(sum);
}

template <class KV, int G>
GK_AVX512 void Partial(const AttentionQuery& q, std::span<const KvSegment> segments, int64_t begin, int64_t end,
                       float* m, float* l, float* o, int64_t o_stride) {
  constexpr int C = PvSlices(G);
  const int H = q.head_dim;
  alignas(64) float s[G * kBlock];
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
      for (; d0 + 16 * C <= H; d0 += 16 * C) BlockPv<KV, G, C>(s, v, seg.stride, nb, d0, o, o_stride, knext, nnext);
      for (; d0 < H; d0 += 16) BlockPv<KV, G, 1>(s, v, seg.stride, nb, d0, o, o_stride, knext, nnext);
    }
  }
  if constexpr (KV::kScale != 1.f) {  // V rows were read as value / kScale
    const __m512 sc = _mm512_set1_ps(KV::kScale);
    for (int g = 0; g < G; ++g) {
      float* row = o + g * o_stride;
      for (int i = 0; i < H; i += 16) _mm512_storeu_ps(row + i, _mm512_mul_ps(sc, _mm512_loadu_ps(row + i)));
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

void AttendHeadsPartialAvx512(const AttentionQuery& q, std::span<const KvSegment> segments, int64_t begin,
                              int64_t end, const AttentionPartial& part) {
  if (q.head_dim % 16 != 0) return AttendHeadsPartialScalar(q, segments, begin, end, part);
  switch (q.kv_dtype) {
    case DType::kBF16: return PartialGroups<Bf16Kv>(q, segments, begin, end, part);
    case DType::kF16: return PartialGroups<F16Kv>(q, segments, begin, end, part);
    case DType::kFp8E4m3: return PartialGroups<Fp8E4m3Kv>(q, segments, begin, end, part);
    case DType::kFp8E5m2: return PartialGroups<Fp8E5m2Kv>(q, segments, begin, end, part);
    default: return PartialGroups<F32Kv>(q, segments, begin, end, part);
  }
}

}  // namespace gk
