#include "bench_common.h"

#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <map>
#include <memory>
#include <new>

#include "tools/bench/ceilings.h"
#include "util/clock.h"

namespace gk::bench {

ThreadPool& Pool(int threads) {
  static std::map<int, std::unique_ptr<ThreadPool>> pools;
  auto& p = pools[threads];
  if (!p) p = std::make_unique<ThreadPool>(threads);
  return *p;
}

namespace {

constexpr uint64_t kProbeBytes = uint64_t(512) << 20;

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
  float* buf = ProbeBuffer();
  uint64_t left = uint64_t(bytes) & ~uint64_t(4095);
  while (left > 0) {
    const uint64_t n = std::min(left, kProbeBytes - offset);
    const float* p = buf + offset / 4;
    pool.ParallelFor(int64_t(n / 4096), [&](int64_t b, int64_t e, int) {
      g_probe_sink = StreamSum(p + b * 1024, (e - b) * 1024);
    });
    offset = (offset + n) % kProbeBytes;
    left -= n;
  }
}

}  // namespace

void ProbeWarmUp(ThreadPool& pool) { ReadProbe(pool, 4096); }

void PairedTimer::StartStep() { start_ = NowSeconds(); }

void PairedTimer::EndStep(benchmark::State& state) {
  const double t1 = NowSeconds();
  state.SetIterationTime(t1 - start_);
  step_seconds_ += t1 - start_;
  ReadProbe(pool_, bytes_);
  probe_seconds_ += NowSeconds() - t1;
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
