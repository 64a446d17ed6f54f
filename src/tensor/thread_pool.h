// A persistent pool of worker threads for data-parallel loops. The calling thread takes part
// as worker 0.
//
// Work is cut into chunks that threads claim from an atomic counter, and a loop is done when
// all chunks are done, not when every worker has checked in. On a shared 2-core machine a
// worker is often descheduled for a whole time slice; with a fixed split every parallel loop
// (hundreds per decoded token) would wait for it, so here the running threads take its
// chunks instead. Workers spin briefly before sleeping (std::atomic wait/notify, a futex),
// because a wake-up per loop would cost more than a small loop's work.
// Thread safety: one thread at a time may call the loop functions (the engine thread).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace gk {

class ThreadPool {
 public:
  using RangeFn = std::function<void(int64_t begin, int64_t end, int thread)>;

  explicit ThreadPool(int num_threads);  // num_threads <= 0: hardware concurrency
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return num_threads_; }
  // OpenMP mode: loops run on this thread's OpenMP team (num_threads = size()) instead of the
  // pool's own workers, which then sleep. For callers that alternate these loops with oneDNN
  // (OpenMP) products on every core, as the trainer does: with two teams each one's idle
  // threads spin while the other's work, and on a machine with as many threads as cores they
  // take the cores from it (docs/PERF.md). Set from the loop-calling thread between loops.
  void SetOpenMp(bool on) { openmp_ = on; }
  bool openmp() const { return openmp_; }
  // Calls fn(i) for i in [0, size()), spread over the threads (one each when all are running).
  void Run(const std::function<void(int)>& fn);
  // Splits [0, n) into a few contiguous chunks per thread: fn(begin, end, thread_index).
  // thread_index < size() identifies the executing thread (for per-thread scratch).
  void ParallelFor(int64_t n, const RangeFn& fn);
  // Chunks of `grain` items, for uneven work.
  void ParallelForDynamic(int64_t n, int64_t grain, const RangeFn& fn);

 private:
  struct Job {
    const RangeFn* fn = nullptr;
    int64_t n = 0, chunk = 1, chunks = 0;
    std::atomic<int64_t> next{0};
    std::atomic<int64_t> done{0};
    std::atomic<int> active{0};  // workers inside this slot; the slot is reused only at zero
  };

  void WorkerLoop(int index);
  void RunChunks(Job& job, int thread);
  void Dispatch(int64_t n, int64_t chunk, const RangeFn& fn);

  int num_threads_;
  std::vector<std::thread> workers_;
  Job jobs_[2];  // job g lives in slot g % 2, so a late worker never sees a half-written job
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  bool openmp_ = false;
};

}  // namespace gk
