#include "tools/bench/ceilings.h"

// GCC 12 warns about an intentionally undefined register inside its own AVX-512 headers.
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "kernels/gemm.h"
#include "kernels/isa.h"

#include "util/clock.h"

namespace gk {
namespace {



__attribute__((target("avx512f"))) float SumAvx512(const float* p, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i + 64 <= n; i += 64) {
    a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

__attribute__((target("avx2"))) float SumAvx2(const float* p, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t i = 0; i + 32 <= n; i += 32) {
    a0 = _mm256_add_ps(a0, _mm256_load_ps(p + i));
    a1 = _mm256_add_ps(a1, _mm256_load_ps(p + i + 8));
    a2 = _mm256_add_ps(a2, _mm256_load_ps(p + i + 16));
    a3 = _mm256_add_ps(a3, _mm256_load_ps(p + i + 24));
  }
  float out[8];
  _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  float s = 0;
  for (float f : out) s += f;
  return s;
}

constexpr int kChains = 12;  // independent accumulators: enough to cover FMA latency × ports

__attribute__((target("avx512f"))) float FmaLoopAvx512(int64_t iters) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(float(i));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.001f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_fmadd_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) float FmaLoopAvx2(int64_t iters) {
  __m256 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm256_set1_ps(float(i));
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.001f);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) acc[i] = _mm256_fmadd_ps(acc[i], a, b);
  }
  float out[8];
  __m256 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm256_add_ps(s, acc[i]);
  _mm256_storeu_ps(out, s);
  return out[0];
}

__attribute__((target("avx512f,avx512bf16"))) float Bf16LoopAvx512(int64_t iters) {
  __m512 acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = _mm512_set1_ps(float(i));
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3a83);
  for (int64_t it = 0; it < iters; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
  }
  __m512 s = acc[0];
  for (int i = 1; i < kChains; ++i) s = _mm512_add_ps(s, acc[i]);
  return _mm512_reduce_add_ps(s);
}

volatile float g_sink;

// Runs fn(iters) on every thread; returns FLOP/s given flops per iteration per thread.
template <class Fn>
double PeakOf(ThreadPool& pool, int repeats, double flops_per_iter, Fn fn) {
  const int64_t iters = 4'000'000;
  std::vector<double> rates;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = NowSeconds();
    pool.Run([&](int) { g_sink = fn(iters); });
    rates.push_back(flops_per_iter * double(iters) * pool.size() / (NowSeconds() - t0) / 1e9);
  }
  return Median(rates);
}

}  // namespace

float StreamSum(const float* p, int64_t n) {
  return ActiveIsa() == Isa::kAvx512 ? SumAvx512(p, n) : SumAvx2(p, n);
}

double MeasureReadBandwidth(ThreadPool& pool, uint64_t bytes, int repeats) {
  void* mem = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return 0;
  ::madvise(mem, bytes, MADV_HUGEPAGE);
  float* p = static_cast<float*>(mem);
  const int64_t n = int64_t(bytes / sizeof(float));
  pool.ParallelFor(n, [&](int64_t b, int64_t e, int) {  // first touch by the reading thread
    for (int64_t i = b; i < e; ++i) p[i] = 1.f;
  });
  std::vector<double> rates;
  for (int r = 0; r < repeats + 1; ++r) {
    const double t0 = NowSeconds();
    pool.ParallelFor(n / 64, [&](int64_t b, int64_t e, int) {
      g_sink = StreamSum(p + b * 64, (e - b) * 64);
    });
    if (r > 0) rates.push_back(double(bytes) / (NowSeconds() - t0) / 1e9);  // the first pass warms up
  }
  ::munmap(mem, bytes);
  return Median(rates);
}

double MeasureFp32Peak(ThreadPool& pool, int repeats) {
  if (ActiveIsa() == Isa::kAvx512) return PeakOf(pool, repeats, 2.0 * 16 * kChains, FmaLoopAvx512);
  if (ActiveIsa() == Isa::kAvx2) return PeakOf(pool, repeats, 2.0 * 8 * kChains, FmaLoopAvx2);
  return 0;
}

double MeasureBf16Peak(ThreadPool& pool, int repeats) {
  if (!__builtin_cpu_supports("avx512bf16") || ActiveIsa() != Isa::kAvx512) return 0;
  return PeakOf(pool, repeats, 2.0 * 32 * kChains, Bf16LoopAvx512);
}

double MeasureSgemmRate(int threads, int repeats) {
  constexpr int64_t M = 512, N = 2048, K = 2048;
  std::vector<float> a(size_t(M * K), 0.5f), b(size_t(N * K), 0.25f), out(size_t(M * N));
  SetGemmThreads(threads);
  std::vector<double> rates;
  for (int r = 0; r < repeats + 1; ++r) {
    const double t0 = NowSeconds();
    Sgemm(false, true, M, N, K, 1.f, a.data(), K, b.data(), K, 0.f, out.data(), N);
    if (r > 0) rates.push_back(2.0 * double(M * N * K) / (NowSeconds() - t0) / 1e9);  // the first warms up
  }
  return Median(rates);
}

Ceilings MeasureCeilings(ThreadPool& pool, uint64_t buffer_bytes, int repeats) {
  Ceilings c;
  c.read_gbps = MeasureReadBandwidth(pool, buffer_bytes, repeats);
  c.fp32_gflops = MeasureFp32Peak(pool, repeats);
  c.bf16_gflops = MeasureBf16Peak(pool, repeats);
  // The oneDNN bf16 rate before sgemm: OpenBLAS's threads (when OpenBLAS runs the sgemm) spin
  // for a while after each call and took one of the two cores from oneDNN's OpenMP threads (its
  // rate then read 270-360 GFLOP/s instead of 680-770 on the AVX-512 BF16 machine, docs/PERF.md).
  c.onednn_bf16_gflops = MeasureOnednnBf16Rate(pool.size(), repeats);
  c.sgemm_gflops = MeasureSgemmRate(pool.size(), repeats);
  return c;
}

}  // namespace gk
