// A persistent pool of worker threads for data-parallel loops. The calling thread takes part
// as worker 0. Workers spin briefly on a generation counter before sleeping (std::atomic
// wait/notify, a futex on Linux), because decode issues hundreds of small parallel loops per
// token and a condition-variable wake-up per loop would cost more than the work.
// Thread safety: one thread at a time may call ParallelFor (the engine thread).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace gk {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);  // num_threads <= 0: hardware concurrency
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return num_threads_; }
  // Calls fn(thread_index) once on each of the size() threads and waits for all.
  void Run(const std::function<void(int)>& fn);
  // Splits [0, n) into contiguous ranges, one per thread: fn(begin, end, thread_index).
  void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn);
  // Dynamic chunks of `grain` items for uneven work: fn(begin, end, thread_index).
  void ParallelForDynamic(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int)>& fn);

 private:
  void WorkerLoop(int index);

  int num_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace gk
