#include "tensor/thread_pool.h"

#include <immintrin.h>

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
    (*job_)(index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

void ThreadPool::Run(const std::function<void(int)>& fn) {
  if (num_threads_ == 1) {
    fn(0);
    return;
  }
  job_ = &fn;
  pending_.store(num_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  fn(0);
  int p = pending_.load(std::memory_order_acquire);
  for (int spin = 0; p != 0 && spin < kSpinIterations; ++spin) {
    _mm_pause();
    p = pending_.load(std::memory_order_acquire);
  }
  while (p != 0) {
    pending_.wait(p, std::memory_order_acquire);
    p = pending_.load(std::memory_order_acquire);
  }
}

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  const int t = int(std::min<int64_t>(num_threads_, n));
  if (t == 1) {
    fn(0, n, 0);
    return;
  }
  Run([&](int i) {
    if (i >= t) return;
    const int64_t begin = n * i / t, end = n * (i + 1) / t;
    fn(begin, end, i);
  });
}

void ThreadPool::ParallelForDynamic(int64_t n, int64_t grain,
                                    const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  if (num_threads_ == 1 || n <= grain) {
    fn(0, n, 0);
    return;
  }
  std::atomic<int64_t> next{0};
  Run([&](int i) {
    for (;;) {
      const int64_t b = next.fetch_add(grain);
      if (b >= n) return;
      fn(b, std::min(n, b + grain), i);
    }
  });
}

}  // namespace gk
