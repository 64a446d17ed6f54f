// Shared pieces of the kernel benchmarks: one ThreadPool per thread count (threads are not
// re-created per benchmark) and a paired read-bandwidth probe, so that memory-bound figures
// print as a ratio to the bandwidth available at the same moment.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>

#include "tensor/thread_pool.h"

namespace gk::bench {

ThreadPool& Pool(int threads);

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
  double step_seconds() const { return step_seconds_; }

 private:
  ThreadPool& pool_;
  double bytes_;
  double start_ = 0, step_seconds_ = 0, probe_seconds_ = 0;
  int64_t steps_ = 0;
};

}  // namespace gk::bench
