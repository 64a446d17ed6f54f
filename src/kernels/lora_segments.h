// LoRA deltas of a batch whose rows use different adapters, the CPU form of Punica's segmented
// gather matrix-vector products (SGMV) that vLLM and S-LoRA serve adapters with: the rows are
// grouped in segments of one adapter each, and per segment
//   y[rows] += (x[rows]·Aᵀ)·Bᵀ        ("shrink" to the rank, then "expand")
// on top of the base product y = x·Wᵀ the batch already shares. Rows of the base model are in
// no segment. The shrink runs over (segment, rank rows), the expand over (segment, output
// column blocks), each as one parallel loop, so a decode step of many adapters costs two
// loops per projection, and each adapter's factors are read once per step.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tensor/matrix.h"
#include "tensor/thread_pool.h"

namespace gk {

struct LoraSegment {
  int64_t row = 0, rows = 0;      // rows [row, row + rows) of x and y
  const MatrixView* a = nullptr;  // (r, in) f32
  const MatrixView* b = nullptr;  // (out, r) f32, the adapter's scaling folded in
};

// Scratch of ApplyLoraSegments, grown on demand and kept (a warm step allocates nothing).
struct LoraScratch {
  std::vector<float> shrunk;  // (rows, r) per segment
  std::vector<float> delta;   // (rows, out) per segment
};

// x: row stride in (= a->cols), y: row stride out (= b->rows); every segment's factors have
// the same in and out. Segments must not overlap.
void ApplyLoraSegments(std::span<const LoraSegment> segments, const float* x, float* y, LoraScratch& scratch,
                       ThreadPool& pool);

}  // namespace gk
