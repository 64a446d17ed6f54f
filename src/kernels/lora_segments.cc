#include "kernels/lora_segments.h"

#include <algorithm>

#include "kernels/matmul.h"
#include "kernels/ops.h"

namespace gk {
namespace {

constexpr int64_t kRankRowsPerTask = 16;  // a packed bf16 panel
constexpr int64_t kColumnsPerTask = 256;

// Runs fn(segment, block) for every block of every segment (blocks_of(segment) each) as one
// parallel loop.
template <class Blocks, class Fn>
void ForEachBlock(std::span<const LoraSegment> segments, std::vector<int64_t>& first_task, Blocks blocks_of, Fn fn,
                  ThreadPool& pool) {
  first_task.clear();
  int64_t tasks = 0;
  for (const LoraSegment& s : segments) {
    first_task.push_back(tasks);
    tasks += blocks_of(s);
  }
  pool.ParallelForDynamic(tasks, 1, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      const size_t si = size_t(std::upper_bound(first_task.begin(), first_task.end(), i) - first_task.begin()) - 1;
      fn(si, i - first_task[si]);
    }
  });
}

}  // namespace

void ApplyLoraSegments(std::span<const LoraSegment> segments, const float* x, LoraScratch& scratch, ThreadPool& pool) {
  if (segments.empty()) return;
  const int64_t in = segments[0].a->cols;
  // Where each segment's shrunk rows (rows × r) and delta rows (rows × out) live.
  scratch.shrunk_at.clear();
  scratch.delta_at.clear();
  int64_t shrunk_n = 0, delta_n = 0;
  for (const LoraSegment& s : segments) {
    scratch.shrunk_at.push_back(shrunk_n);
    scratch.delta_at.push_back(delta_n);
    shrunk_n += s.rows * s.a->rows;
    delta_n += s.rows * s.b->rows;
  }
  if (int64_t(scratch.shrunk.size()) < shrunk_n) scratch.shrunk.resize(size_t(shrunk_n));
  if (int64_t(scratch.delta.size()) < delta_n) scratch.delta.resize(size_t(delta_n));
  float* shrunk = scratch.shrunk.data();
  float* delta = scratch.delta.data();

  ForEachBlock(
      segments, scratch.first_task,
      [](const LoraSegment& s) { return (s.a->rows + kRankRowsPerTask - 1) / kRankRowsPerTask; },
      [&](size_t si, int64_t block) {
        const LoraSegment& s = segments[si];
        const int64_t r0 = block * kRankRowsPerTask, r1 = std::min(s.a->rows, r0 + kRankRowsPerTask);
        MatMulRows(*s.a, x + s.row * in, s.rows, shrunk + scratch.shrunk_at[si], r0, r1);
      },
      pool);
  ForEachBlock(
      segments, scratch.first_task,
      [](const LoraSegment& s) { return (s.b->rows + kColumnsPerTask - 1) / kColumnsPerTask; },
      [&](size_t si, int64_t block) {
        const LoraSegment& s = segments[si];
        const int64_t out = s.b->rows, c0 = block * kColumnsPerTask, c1 = std::min(out, c0 + kColumnsPerTask);
        float* d = delta + scratch.delta_at[si];
        MatMulRows(*s.b, shrunk + scratch.shrunk_at[si], s.rows, d, c0, c1);
        for (int64_t t = 0; t < s.rows; ++t) Add(d + t * out + c0, s.y + (s.row + t) * out + c0, c1 - c0);
      },
      pool);
}

}  // namespace gk
