// Shared pieces of the kernel benchmarks: one ThreadPool per thread count (threads are not
// re-created per benchmark) and the machine's read bandwidth for that count, measured once
// per process (tools/bench/ceilings.h) so memory-bound figures print as a ratio to it.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>

#include "tensor/thread_pool.h"

namespace gk::bench {

ThreadPool& Pool(int threads);
double ReadBandwidthGBps(int threads);  // GB/s (1e9 bytes), 1 GiB buffer, median of 3

// Wall-clock seconds since construction (the benchmarks run on pool threads, so the
// figures use real time, measured around the timing loop).
class WallTimer {
 public:
  WallTimer();
  double Seconds() const;

 private:
  double start_;
};

// Sets GB/s (bytes_per_iter × iterations ÷ seconds), bw_GB/s (the read bandwidth for
// `threads`) and of_bw (their ratio), as plain numbers.
void SetBandwidthCounters(benchmark::State& state, double bytes_per_iter, double seconds, int threads);

// Paired measurement for a shared, noisy machine: after each timed step the benchmark reads
// the same number of bytes from a 512 MiB buffer with plain AVX-512 sums on the same threads
// (ReadProbe), so that both see the same interference; of_bw is then the ratio of the two
// times. PairedTimer collects both.
void ProbeWarmUp(ThreadPool& pool);  // allocates and touches the probe buffer once

class PairedTimer {
 public:
  explicit PairedTimer(ThreadPool& pool, double bytes_per_step) : pool_(pool), bytes_(bytes_per_step) {}
  void StartStep();
  void EndStep(benchmark::State& state);  // sets the iteration time, then runs the probe
  // GB/s, bw_GB/s (the probe's rate) and of_bw = probe time ÷ step time.
  void SetCounters(benchmark::State& state) const;

 private:
  ThreadPool& pool_;
  double bytes_;
  double start_ = 0, step_seconds_ = 0, probe_seconds_ = 0;
  int64_t steps_ = 0;
};

}  // namespace gk::bench
