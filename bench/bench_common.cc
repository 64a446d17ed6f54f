#include "bench_common.h"

#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <new>

namespace gk::bench {

ThreadPool& Pool(int threads) {
  static std::map<int, std::unique_ptr<ThreadPool>> pools;
  auto& p = pools[threads];
  if (!p) p = std::make_unique<ThreadPool>(threads);
  return *p;
}

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

constexpr uint64_t kProbeBytes = uint64_t(512) << 20;

__attribute__((target("avx512f"))) float Sum(const float* p, int64_t n) {
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
  alignas(32) float out[8];
  _mm256_store_ps(out, _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  return out[0];
}

float* ProbeBuffer() {
  static float* buf = [] {
    void* m = ::mmap(nullptr, kProbeBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) throw std::bad_alloc();
    ::madvise(m, kProbeBytes, MADV_HUGEPAGE);
    float* f = static_cast<float*>(m);
    for (uint64_t i = 0; i < kProbeBytes / 4; ++i) f[i] = 1.f;
    return f;
  }();
  return buf;
}

volatile float g_probe_sink;

// Reads `bytes` (rounded to 4 KiB) of the probe buffer, continuing where the last call ended.
void ReadProbe(ThreadPool& pool, double bytes) {
  static uint64_t offset = 0;
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  float* buf = ProbeBuffer();
  uint64_t left = uint64_t(bytes) & ~uint64_t(4095);
  while (left > 0) {
    const uint64_t n = std::min(left, kProbeBytes - offset);
    const float* p = buf + offset / 4;
    pool.ParallelFor(int64_t(n / 4096), [&](int64_t b, int64_t e, int) {
      g_probe_sink = avx512 ? Sum(p + b * 1024, (e - b) * 1024) : SumAvx2(p + b * 1024, (e - b) * 1024);
    });
    offset = (offset + n) % kProbeBytes;
    left -= n;
  }
}

}  // namespace

void ProbeWarmUp(ThreadPool& pool) { ReadProbe(pool, 4096); }

void PairedTimer::StartStep() { start_ = Now(); }

void PairedTimer::EndStep(benchmark::State& state) {
  const double t1 = Now();
  state.SetIterationTime(t1 - start_);
  step_seconds_ += t1 - start_;
  ReadProbe(pool_, bytes_);
  probe_seconds_ += Now() - t1;
  ++steps_;
}

void PairedTimer::SetCounters(benchmark::State& state) const {
  const double total = bytes_ * double(steps_);
  state.SetBytesProcessed(int64_t(total));
  state.counters["GB/s"] = total / step_seconds_ / 1e9;
  state.counters["bw_GB/s"] = total / probe_seconds_ / 1e9;
  state.counters["of_bw"] = probe_seconds_ / step_seconds_;
}

}  // namespace gk::bench
