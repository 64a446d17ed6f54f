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
