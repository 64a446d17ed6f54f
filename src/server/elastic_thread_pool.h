// cpp-httplib serves each connection on one pool thread for as long as the connection is open,
// including the keep-alive wait for its next request (5 s). With a fixed pool, a burst of more
// connections than threads (a benchmark at request rate "inf") leaves the extra connections
// queued behind idle kept-alive ones: 200 tiny-model requests at once took 16.4 s on 64
// threads, 6.7 s (bound by the model) with this pool. This pool starts `min_threads` and adds a thread whenever a
// connection arrives and none is idle, up to `max_threads` (then connections queue as before).
// Threads are not retired: the count only grows to the peak number of open connections.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include <httplib.h>

namespace gk {

class ElasticThreadPool : public httplib::TaskQueue {
 public:
  ElasticThreadPool(int min_threads, int max_threads);
  ~ElasticThreadPool() override;

  void enqueue(std::function<void()> fn) override;
  // Runs what is queued, then joins every thread.
  void shutdown() override;

  int threads() const;

 private:
  void Worker();
  void SpawnLocked();

  const int max_threads_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  int idle_ = 0;
  bool shutdown_ = false;
};

}  // namespace gk
