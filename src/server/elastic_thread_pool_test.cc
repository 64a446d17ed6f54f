#include "server/elastic_thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>

namespace gk {
namespace {

// Jobs that block until all of them run at once: only possible if the pool grew to n threads.
TEST(ElasticThreadPoolTest, GrowsToRunBlockedJobsTogether) {
  ElasticThreadPool pool(2, 64);
  constexpr int kJobs = 40;
  std::mutex mu;
  std::condition_variable cv;
  int running = 0;
  std::atomic<int> done{0};
  for (int i = 0; i < kJobs; ++i) {
    pool.enqueue([&] {
      std::unique_lock<std::mutex> lock(mu);
      ++running;
      cv.notify_all();
      const bool all = cv.wait_for(lock, std::chrono::seconds(20), [&] { return running == kJobs; });
      if (all) ++done;
    });
  }
  pool.shutdown();
  EXPECT_EQ(done.load(), kJobs);
  EXPECT_EQ(pool.threads(), 0);  // joined
}

TEST(ElasticThreadPoolTest, StopsGrowingAtTheCapAndStillRunsEverything) {
  ElasticThreadPool pool(1, 4);
  std::atomic<int> done{0};
  for (int i = 0; i < 100; ++i) {
    pool.enqueue([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ++done;
    });
  }
  EXPECT_LE(pool.threads(), 4);
  pool.shutdown();  // runs what is queued first
  EXPECT_EQ(done.load(), 100);
}

TEST(ElasticThreadPoolTest, IdleThreadsAreReused) {
  ElasticThreadPool pool(2, 64);
  for (int i = 0; i < 50; ++i) {
    std::atomic<bool> ran{false};
    pool.enqueue([&] { ran = true; });
    while (!ran) std::this_thread::yield();
  }
  EXPECT_LE(pool.threads(), 3);  // one job at a time never needs many threads
}

}  // namespace
}  // namespace gk
