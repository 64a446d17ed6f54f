// LoRA deltas of a batch whose rows use different adapters, the CPU form of Punica's segmented
// gather matrix-vector products (SGMV) that vLLM and S-LoRA serve adapters with: the rows are
// grouped in segments of one adapter each, and per segment
//   y[rows] += (x[rows]·Aᵀ)·Bᵀ        ("shrink" to the rank, then "expand")
// on top of the base product y = x·Wᵀ the batch already shares. Rows of the base model are in
// no segment. Projections that read the same x (q, k, v; gate, up) go in one call: all their
// shrinks run as one parallel loop over (segment, 16 rank rows), all their expands as one over
// (segment, output column block), so a decode step costs two loops per group of projections,
// and each adapter's factors are read once per step.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tensor/matrix.h"
#include "tensor/thread_pool.h"

namespace gk {

struct LoraSegment {
  int64_t row = 0, rows = 0;      // rows [row, row + rows) of x and y
  const MatrixView* a = nullptr;  // (r, in): f32, or bf16 (row-major or packed, r % 16 == 0)
  const MatrixView* b = nullptr;  // (out, r), the adapter's scaling folded in
  float* y = nullptr;             // the projection's output, row stride out (= b->rows)
};

// Scratch of ApplyLoraSegments, grown on demand and kept (a warm step allocates nothing).
struct LoraScratch {
  std::vector<float> shrunk;  // (rows, r) per segment
  std::vector<float> delta;   // (rows, out) per segment
  std::vector<int64_t> shrunk_at, delta_at, first_task;
};

// x: row stride in (= every segment's a->cols).
void ApplyLoraSegments(std::span<const LoraSegment> segments, const float* x, LoraScratch& scratch, ThreadPool& pool);

}  // namespace gk
