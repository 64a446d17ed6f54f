#include "server/elastic_thread_pool.h"

#include <algorithm>

namespace gk {

ElasticThreadPool::ElasticThreadPool(int min_threads, int max_threads) : max_threads_(std::max(1, max_threads)) {
  std::lock_guard<std::mutex> lock(mu_);
  for (int i = 0; i < std::clamp(min_threads, 1, max_threads_); ++i) SpawnLocked();
}

ElasticThreadPool::~ElasticThreadPool() { shutdown(); }

void ElasticThreadPool::SpawnLocked() { threads_.emplace_back([this] { Worker(); }); }

void ElasticThreadPool::enqueue(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  if (shutdown_) return;  // httplib stops accepting before it shuts the pool down; never spawn unjoined
  jobs_.push_back(std::move(fn));
  // Idle threads that are already woken but have not taken a job yet still count as idle:
  // only grow when the queue is longer than the threads that can take from it.
  if (static_cast<int>(jobs_.size()) > idle_ && static_cast<int>(threads_.size()) < max_threads_) SpawnLocked();
  cv_.notify_one();
}

void ElasticThreadPool::Worker() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      ++idle_;
      cv_.wait(lock, [this] { return shutdown_ || !jobs_.empty(); });
      --idle_;
      if (jobs_.empty()) return;  // shutting down, nothing left
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

void ElasticThreadPool::shutdown() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_ = true;
    threads.swap(threads_);
  }
  cv_.notify_all();
  for (auto& t : threads) t.join();
}

int ElasticThreadPool::threads() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(threads_.size());
}

}  // namespace gk
