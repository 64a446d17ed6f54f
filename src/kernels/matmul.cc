#include "kernels/matmul.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "kernels/gemm.h"
#include "kernels/isa.h"
#include "kernels/matmul_q8.h"

namespace gk {

namespace {

using RowsFn = void (*)(const MatrixView&, const float*, int64_t, float*, int64_t, int64_t);
using PackedFn = void (*)(const MatrixView&, const uint32_t*, const uint32_t*, int64_t, float*, int64_t, int64_t);

RowsFn ActiveRowsFn() {
  switch (ActiveIsa()) {
    case Isa::kAvx512: return &MatMulRowsAvx512;
    case Isa::kAvx2: return &MatMulRowsAvx2;
    case Isa::kScalar: break;
  }
  return &MatMulRowsScalar;
}

PackedFn ActivePackedFn() {
  return ActiveIsa() == Isa::kAvx512 && CpuHasAvx512Bf16() ? &MatMulPackedAvx512Bf16 : &MatMulPackedScalar;
}

std::atomic<int> g_bf16_mode{-1};
std::atomic<int64_t> g_blas_min_tokens{-1};

// From 64 tokens on the sgemm route beat our AVX2 kernels (docs/PERF.md, "AVX2: prefill
// through sgemm"). On AVX-512 CPUs it was not measured against our kernels, so it stays off
// there unless GEMMAKIT_BLAS_MIN_TOKENS asks for it.
constexpr int64_t kDefaultBlasMinTokens = 64;

bool UseBlas(const MatrixView& w, int64_t T) {
  const int64_t min_tokens = BlasMinTokens();
  return min_tokens > 0 && T >= min_tokens && !w.packed && (w.dtype == DType::kF32 || w.dtype == DType::kBF16);
}

// Activations as bf16 pairs (and their remainders in split mode) for the packed kernels. One
// buffer per calling thread, grown to the largest call and then reused: no allocation once warm.
struct PairBuffers {
  std::vector<uint32_t> hi, lo;
};

PairBuffers& Pairs(int64_t n) {
  thread_local PairBuffers buffers;
  if (int64_t(buffers.hi.size()) < n) {
    buffers.hi.resize(size_t(n));
    buffers.lo.resize(size_t(n));
  }
  return buffers;
}

void ToBf16PairsScalar(const float* x, int64_t n, uint32_t* hi, uint32_t* lo) {
  for (int64_t i = 0; i < n; i += 2) {
    const uint16_t h0 = F32ToBf16(x[i]), h1 = F32ToBf16(x[i + 1]);
    hi[i / 2] = uint32_t(h0) | (uint32_t(h1) << 16);
    if (lo) {
      lo[i / 2] = uint32_t(F32ToBf16(x[i] - Bf16ToF32(h0))) | (uint32_t(F32ToBf16(x[i + 1] - Bf16ToF32(h1))) << 16);
    }
  }
}

// 32 activations per step with vcvtne2ps2bf16 (round to nearest even, like F32ToBf16); the
// remainder x - bf16(x) is formed exactly in f32 and rounded the same way.
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void ToBf16PairsAvx512(const float* x, int64_t n,
                                                                               uint32_t* hi, uint32_t* lo) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 a = _mm512_loadu_ps(x + i), b = _mm512_loadu_ps(x + i + 16);
    const __m512i h = (__m512i)_mm512_cvtne2ps_pbh(b, a);
    _mm512_storeu_si512(hi + i / 2, h);
    if (lo) {
      const __m512 ha = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(h)), 16));
      const __m512 hb =
          _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(h, 1)), 16));
      _mm512_storeu_si512(lo + i / 2, (__m512i)_mm512_cvtne2ps_pbh(_mm512_sub_ps(b, hb), _mm512_sub_ps(a, ha)));
    }
  }
  ToBf16PairsScalar(x + i, n - i, hi + i / 2, lo ? lo + i / 2 : nullptr);
}

void ToBf16Pairs(const float* x, int64_t n, uint32_t* hi, uint32_t* lo) {
  if (CpuHasAvx512Bf16() && ActiveIsa() == Isa::kAvx512) {
    ToBf16PairsAvx512(x, n, hi, lo);
  } else {
    ToBf16PairsScalar(x, n, hi, lo);
  }
}

constexpr size_t kMaxSharedProducts = 8;  // MatMulShared's fused loop keeps its block table on the stack

// Packed products (all matrices packed, one width) in one parallel loop over whole 4-panel
// blocks of every matrix: the micro-kernel's full width (kernels/cpu/matmul_packed_avx512.cc).
// Cutting a matrix anywhere else left 1- and 2-panel remainders, which run at about half the
// rate: ~8 % of a 270M prefill and ~4.5 % of its decode samples (perf, docs/PERF.md).
void PackedMatMuls(std::span<const WeightProduct> products, const float* x, int64_t T, ThreadPool& pool) {
  const int64_t cols = products[0].w->cols, pairs = cols / 2;
  PairBuffers& b = Pairs(T * pairs);
  uint32_t* hi = b.hi.data();
  uint32_t* lo = ActiveBf16Activations() == Bf16Activations::kSplit ? b.lo.data() : nullptr;
  if (T > 8) {
    pool.ParallelFor(T, [&](int64_t t0, int64_t t1, int) {
      ToBf16Pairs(x + t0 * cols, (t1 - t0) * cols, hi + t0 * pairs, lo ? lo + t0 * pairs : nullptr);
    });
  } else {
    ToBf16Pairs(x, T * cols, hi, lo);
  }
  constexpr int64_t kBlockPanels = 4;
  int64_t first_block[kMaxSharedProducts + 1] = {0};  // matrix i's blocks: [first_block[i], first_block[i + 1])
  for (size_t i = 0; i < products.size(); ++i) {
    first_block[i + 1] = first_block[i] + (products[i].w->rows / 16 + kBlockPanels - 1) / kBlockPanels;
  }
  const int64_t blocks = first_block[products.size()];
  const int64_t threads = pool.size();
  // Decode (T = 1) streams the weights: about four long chunks per thread, spares for stealing.
  // Prefill: ~8 chunks per thread, for balance.
  const int64_t grain = T == 1 ? std::max<int64_t>(1, blocks / (4 * threads))
                               : (blocks + 8 * threads - 1) / (8 * threads);
  const PackedFn fn = ActivePackedFn();
  pool.ParallelForDynamic(blocks, grain, [&](int64_t b0, int64_t b1, int) {
    for (size_t i = 0; i < products.size(); ++i) {
      const int64_t lo_b = std::max(b0, first_block[i]), hi_b = std::min(b1, first_block[i + 1]);
      if (lo_b >= hi_b) continue;
      const MatrixView& w = *products[i].w;
      const int64_t p0 = (lo_b - first_block[i]) * kBlockPanels;
      const int64_t p1 = std::min(w.rows / 16, (hi_b - first_block[i]) * kBlockPanels);
      fn(w, hi, lo, T, products[i].y, p0, p1);
    }
  });
}

}  // namespace

Bf16Activations ActiveBf16Activations() {
  const int forced = g_bf16_mode.load(std::memory_order_relaxed);
  if (forced >= 0) return Bf16Activations(forced);
  static const Bf16Activations from_env = [] {
    const char* e = std::getenv("GEMMAKIT_BF16_ACTIVATIONS");
    return e && std::strcmp(e, "round") == 0 ? Bf16Activations::kRound : Bf16Activations::kSplit;
  }();
  return from_env;
}

void SetBf16Activations(Bf16Activations mode) { g_bf16_mode.store(int(mode)); }

int64_t BlasMinTokensDefault() {
  static const int64_t from_env = [] {
    const char* e = std::getenv("GEMMAKIT_BLAS_MIN_TOKENS");
    if (e && *e) return std::max<int64_t>(0, std::atoll(e));
    return BestSupportedIsa() == Isa::kAvx512 ? int64_t(0) : kDefaultBlasMinTokens;
  }();
  return from_env;
}

int64_t BlasMinTokens() {
  const int64_t forced = g_blas_min_tokens.load(std::memory_order_relaxed);
  return forced >= 0 ? forced : BlasMinTokensDefault();
}

void SetBlasMinTokens(int64_t tokens) { g_blas_min_tokens.store(std::max<int64_t>(0, tokens)); }

void MatMulRows(const MatrixView& w, const float* x, int64_t T, float* y, int64_t r0, int64_t r1) {
  if (w.dtype == DType::kQ8_0) {  // int8 weights: kernels/matmul_q8.h
    MatMulRowsQ8(w, x, T, y, r0, r1);
    return;
  }
  if (w.packed) {
    PairBuffers& b = Pairs(T * w.cols / 2);
    uint32_t* lo = ActiveBf16Activations() == Bf16Activations::kSplit ? b.lo.data() : nullptr;
    ToBf16Pairs(x, T * w.cols, b.hi.data(), lo);
    ActivePackedFn()(w, b.hi.data(), lo, T, y, r0 / 16, (r1 + 15) / 16);
    return;
  }
  ActiveRowsFn()(w, x, T, y, r0, r1);
}

void MatMulShared(std::span<const WeightProduct> products, const float* x, int64_t T, ThreadPool& pool) {
  bool fused = !products.empty() && products.size() <= kMaxSharedProducts;
  for (const WeightProduct& p : products) fused = fused && p.w->packed && p.w->cols == products[0].w->cols;
  if (fused) {
    PackedMatMuls(products, x, T, pool);
    return;
  }
  for (const WeightProduct& p : products) MatMul(*p.w, x, T, p.y, pool);
}

void MatMul(const MatrixView& w, const float* x, int64_t T, float* y, ThreadPool& pool) {
  if (w.dtype == DType::kQ8_0) {  // int8 weights: kernels/matmul_q8.h
    MatMulQ8(w, x, T, y, pool);
    return;
  }
  if (w.packed) {
    const WeightProduct one{&w, y};
    PackedMatMuls({&one, 1}, x, T, pool);
    return;
  }
  if (UseBlas(w, T)) {
    EnsureGemmThreads(1);
    const int64_t blocks = (w.rows + 15) / 16;
    pool.ParallelFor(blocks, [&](int64_t b0, int64_t b1, int) {
      WeightMatMulRows(w, x, T, y, b0 * 16, std::min(w.rows, b1 * 16));
    });
    return;
  }
  const RowsFn rows_fn = ActiveRowsFn();
  // Split rows in blocks of 16 so threads never share a cache line of y.
  const int64_t blocks = (w.rows + 15) / 16;
  pool.ParallelFor(blocks, [&](int64_t b0, int64_t b1, int) {
    rows_fn(w, x, T, y, b0 * 16, std::min(w.rows, b1 * 16));
  });
}

}  // namespace gk
