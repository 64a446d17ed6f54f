#include "tensor/thread_pool.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>

namespace gk {
namespace {
constexpr int kSpinIterations = 20000;  // ~ tens of microseconds before sleeping
}

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = int(std::thread::hardware_concurrency());
  if (num_threads <= 0) num_threads = 1;
  num_threads_ = num_threads;
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::RunChunks(Job& job, int thread) {
  for (;;) {
    const int64_t c = job.next.fetch_add(1, std::memory_order_relaxed);
    if (c >= job.chunks) return;
    (*job.fn)(c * job.chunk, std::min(job.n, (c + 1) * job.chunk), thread);
    if (job.done.fetch_add(1, std::memory_order_acq_rel) + 1 == job.chunks) job.done.notify_one();
  }
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = generation_.load(std::memory_order_acquire);
    for (int spin = 0; g == seen && spin < kSpinIterations; ++spin) {
      _mm_pause();
      g = generation_.load(std::memory_order_acquire);
    }
    if (g == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      continue;
    }
    seen = g;
    if (stop_.load()) return;
    Job& job = jobs_[g & 1];
    job.active.fetch_add(1);  // seq_cst with the dispatcher's check below
    // Joined too late: the dispatcher has moved on and may be refilling this slot.
    if (generation_.load() == g) RunChunks(job, index);
    job.active.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::Dispatch(int64_t n, int64_t chunk, const RangeFn& fn) {
  const int64_t chunks = (n + chunk - 1) / chunk;
  if (num_threads_ == 1 || chunks == 1) {
    fn(0, n, 0);
    return;
  }
  if (openmp_) {
    // The same chunks, claimed from a counter by the team's threads (a descheduled thread's
    // chunks are taken by the others, as below).
    std::atomic<int64_t> next{0};
#pragma omp parallel num_threads(num_threads_)
    {
      const int thread = omp_get_thread_num();
      for (int64_t c = next.fetch_add(1, std::memory_order_relaxed); c < chunks;
           c = next.fetch_add(1, std::memory_order_relaxed)) {
        fn(c * chunk, std::min(n, (c + 1) * chunk), thread);
      }
    }
    return;
  }
  const uint64_t g = generation_.load(std::memory_order_relaxed) + 1;
  Job& job = jobs_[g & 1];
  while (job.active.load() != 0) _mm_pause();  // a late worker leaving
  job.fn = &fn;
  job.n = n;
  job.chunk = chunk;
  job.chunks = chunks;
  job.next.store(0, std::memory_order_relaxed);
  job.done.store(0, std::memory_order_relaxed);
  generation_.store(g, std::memory_order_release);
  generation_.notify_all();
  RunChunks(job, 0);
  int64_t d = job.done.load(std::memory_order_acquire);
  for (int spin = 0; d != chunks && spin < kSpinIterations; ++spin) {
    _mm_pause();
    d = job.done.load(std::memory_order_acquire);
  }
  while (d != chunks) {
    job.done.wait(d, std::memory_order_acquire);
    d = job.done.load(std::memory_order_acquire);
  }
}

void ThreadPool::Run(const std::function<void(int)>& fn) {
  Dispatch(num_threads_, 1, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) fn(int(i));
  });
}

void ThreadPool::ParallelFor(int64_t n, const RangeFn& fn) {
  if (n <= 0) return;
  // Four chunks per thread: long contiguous runs for streaming, spare chunks for stealing.
  const int64_t chunk = std::max<int64_t>(1, (n + 4 * num_threads_ - 1) / (4 * num_threads_));
  Dispatch(n, chunk, fn);
}

void ThreadPool::ParallelForDynamic(int64_t n, int64_t grain, const RangeFn& fn) {
  if (n <= 0) return;
  Dispatch(n, std::max<int64_t>(1, grain), fn);
}

}  // namespace gk
