// AttendTasks honours a task's [begin, end) position range (how the paged KV cache passes
// whole blocks when a window starts or ends inside one), on the whole-task and split paths.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/attention.h"

namespace gk {
namespace {

// Paged-style K/V of one head: `blocks` blocks of `bs` rows of H values (f32 or f16 bits).
struct Blocks {
  int64_t bs, H;
  DType dtype;
  std::vector<float> f32;
  std::vector<uint16_t> f16;
  std::vector<KvSegment> segs;

  Blocks(int64_t blocks, int64_t bs_, int64_t H_, DType dt, std::mt19937& rng) : bs(bs_), H(H_), dtype(dt) {
    std::normal_distribution<float> nd;
    const size_t n = size_t(2 * blocks * bs * H);  // K blocks, then V blocks
    for (size_t i = 0; i < n; ++i) {
      const float x = nd(rng);
      f32.push_back(x);
      f16.push_back(F32ToF16(x));
    }
    for (int64_t b = 0; b < blocks; ++b) segs.push_back({Row(b * bs, false), Row(b * bs, true), bs, H});
  }
  const void* Row(int64_t pos, bool v) const {
    const size_t i = (v ? f32.size() / 2 : 0) + size_t(pos * H);
    if (dtype == DType::kF16) return f16.data() + i;
    return f32.data() + i;
  }
  // Positions [begin, end) as their own segments (the first cut, the last shortened).
  std::vector<KvSegment> Trimmed(int64_t begin, int64_t end) const {
    std::vector<KvSegment> out;
    for (int64_t p = begin; p < end;) {
      const int64_t len = std::min(end - p, bs - p % bs);
      out.push_back({Row(p, false), Row(p, true), len, H});
      p += len;
    }
    return out;
  }
};

struct RangeCase {
  int64_t tasks, blocks, bs, H;
  DType dtype;
};

class PagedAttendTasks : public ::testing::TestWithParam<RangeCase> {};

TEST_P(PagedAttendTasks, RangeMatchesTrimmedSegments) {
  const RangeCase& c = GetParam();
  std::mt19937 rng(9);
  const Blocks kv(c.blocks, c.bs, c.H, c.dtype, rng);
  const int group = 3;
  std::vector<float> q(size_t(c.tasks * group * c.H));
  std::normal_distribution<float> nd;
  for (auto& x : q) x = nd(rng);
  // Task i: a random range of at least one position over all blocks.
  const int64_t n = c.blocks * c.bs;
  std::vector<int64_t> begin(size_t(c.tasks)), end(size_t(c.tasks));
  for (int64_t i = 0; i < c.tasks; ++i) {
    begin[size_t(i)] = int64_t(rng() % uint32_t(n / 4));
    end[size_t(i)] = n - int64_t(rng() % uint32_t(n / 4));
  }
  auto query = [&](int64_t i) {
    return AttentionQuery{q.data() + i * group * c.H, c.H, group, int(c.H), 0.2f, c.dtype};
  };
  std::vector<float> got(q.size()), want(q.size());
  ThreadPool pool(2);
  AttendTasks(
      c.tasks,
      [&](int64_t i, AttentionTask& t) {
        t.query = query(i);
        t.segments = kv.segs;
        t.begin = begin[size_t(i)];
        t.end = end[size_t(i)];
        t.out = got.data() + i * group * c.H;
        t.out_stride = c.H;
      },
      pool);
  for (int64_t i = 0; i < c.tasks; ++i) {
    AttendHeads(query(i), kv.Trimmed(begin[size_t(i)], end[size_t(i)]), want.data() + i * group * c.H, c.H);
  }
  // Whole tasks cut their blocks where the trimmed segments do: identical. Splits merge
  // partial softmaxes: a few ulps.
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5f * (1.f + std::fabs(want[i]))) << i;
}

INSTANTIATE_TEST_SUITE_P(Ranges, PagedAttendTasks,
                         ::testing::Values(RangeCase{16, 12, 5, 32, DType::kF32},     // whole tasks, SIMD
                                           RangeCase{16, 12, 5, 24, DType::kF16},     // whole tasks, scalar
                                           RangeCase{1, 200, 16, 64, DType::kF32},    // one task: splits
                                           RangeCase{2, 150, 7, 32, DType::kF16}));  // two tasks: splits

}  // namespace
}  // namespace gk
