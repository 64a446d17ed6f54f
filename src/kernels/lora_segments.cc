#include "kernels/lora_segments.h"

#include <algorithm>

#include "kernels/matmul.h"

namespace gk {
namespace {

constexpr int64_t kRankRowsPerTask = 8;
constexpr int64_t kColumnsPerTask = 256;

// Task i of a loop cut into per-segment blocks: its segment and block (a linear scan: a step
// has a handful of segments).
std::pair<size_t, int64_t> Locate(const std::vector<int64_t>& first_task, int64_t i) {
  const size_t s = size_t(std::upper_bound(first_task.begin(), first_task.end(), i) - first_task.begin()) - 1;
  return {s, i - first_task[s]};
}

}  // namespace

void ApplyLoraSegments(std::span<const LoraSegment> segments, const float* x, float* y, LoraScratch& scratch,
                       ThreadPool& pool) {
  if (segments.empty()) return;
  const int64_t in = segments[0].a->cols, out = segments[0].b->rows;
  int64_t rows_end = 0, max_rank = 0;
  for (const LoraSegment& s : segments) {
    rows_end = std::max(rows_end, s.row + s.rows);
    max_rank = std::max(max_rank, s.a->rows);
  }
  // Segment s's shrunk rows live at row offset s.row (stride its rank), its delta rows likewise.
  if (int64_t(scratch.shrunk.size()) < rows_end * max_rank) scratch.shrunk.resize(size_t(rows_end * max_rank));
  if (int64_t(scratch.delta.size()) < rows_end * out) scratch.delta.resize(size_t(rows_end * out));
  float* shrunk = scratch.shrunk.data();
  float* delta = scratch.delta.data();

  std::vector<int64_t> first_task;  // per segment, its first task of the loop at hand
  int64_t tasks = 0;
  for (const LoraSegment& s : segments) {
    first_task.push_back(tasks);
    tasks += (s.a->rows + kRankRowsPerTask - 1) / kRankRowsPerTask;
  }
  pool.ParallelForDynamic(tasks, 1, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      const auto [si, block] = Locate(first_task, i);
      const LoraSegment& s = segments[si];
      const int64_t r0 = block * kRankRowsPerTask, r1 = std::min(s.a->rows, r0 + kRankRowsPerTask);
      MatMulRows(*s.a, x + s.row * in, s.rows, shrunk + s.row * max_rank, r0, r1);
    }
  });

  first_task.clear();
  tasks = 0;
  const int64_t blocks = (out + kColumnsPerTask - 1) / kColumnsPerTask;
  for (size_t s = 0; s < segments.size(); ++s) {
    first_task.push_back(tasks);
    tasks += blocks;
  }
  pool.ParallelForDynamic(tasks, 1, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      const auto [si, block] = Locate(first_task, i);
      const LoraSegment& s = segments[si];
      const int64_t c0 = block * kColumnsPerTask, c1 = std::min(out, c0 + kColumnsPerTask);
      float* d = delta + s.row * out;
      MatMulRows(*s.b, shrunk + s.row * max_rank, s.rows, d, c0, c1);
      for (int64_t t = 0; t < s.rows; ++t) {
        float* yt = y + (s.row + t) * out;
        const float* dt = d + t * out;
        for (int64_t c = c0; c < c1; ++c) yt[c] += dt[c];
      }
    }
  });
}

}  // namespace gk
