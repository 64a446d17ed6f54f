#include "tensor/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace gk {
namespace {

TEST(ThreadPool, ParallelForCoversEveryIndexOnce) {
  ThreadPool pool(3);
  for (int64_t n : {0, 1, 2, 5, 1000}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    for (int rep = 0; rep < 50; ++rep) {
      pool.ParallelFor(n, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
      });
    }
    for (auto& h : hits) EXPECT_EQ(h.load(), 50);
  }
}

// OpenMP mode: the same loops on the calling thread's OpenMP team, switched per loop.
TEST(ThreadPool, OpenMpModeCoversEveryIndexOnceWithThreadIndicesBelowSize) {
  ThreadPool pool(3);
  for (bool openmp : {true, false, true}) {
    pool.SetOpenMp(openmp);
    EXPECT_EQ(pool.openmp(), openmp);
    for (int64_t n : {0, 1, 2, 5, 1000}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::atomic<int> bad_thread{0};
      for (int rep = 0; rep < 20; ++rep) {
        pool.ParallelFor(n, [&](int64_t b, int64_t e, int t) {
          if (t < 0 || t >= 3) bad_thread++;
          for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
        });
        pool.ParallelForDynamic(n, 7, [&](int64_t b, int64_t e, int t) {
          if (t < 0 || t >= 3) bad_thread++;
          for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
        });
      }
      for (auto& h : hits) EXPECT_EQ(h.load(), 40);
      EXPECT_EQ(bad_thread.load(), 0);
    }
    std::vector<std::atomic<int>> seen(3);
    pool.Run([&](int i) { seen[size_t(i)]++; });
    for (auto& s : seen) EXPECT_EQ(s.load(), 1);
  }
}

TEST(ThreadPool, DynamicChunksCoverEveryIndexOnce) {
  ThreadPool pool(2);
  std::vector<std::atomic<int>> hits(997);
  pool.ParallelForDynamic(997, 10, [&](int64_t b, int64_t e, int t) {
    EXPECT_LT(t, 2);
    for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
  });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(ThreadPool, RunUsesEveryThread) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> seen(4);
  pool.Run([&](int i) { seen[size_t(i)]++; });
  for (auto& s : seen) EXPECT_EQ(s.load(), 1);
}

}  // namespace
}  // namespace gk
