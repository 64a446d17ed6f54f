// Device bytes the GPU training attention (kernels/cuda/attention_train.h) works in, in a header
// without CUDA so that `gemmakit plan` counts what the GPU trainer allocates: one tile of
// queries' buffers (head-major Q and dO, K and V, P and dS in the operand type; S and dP in
// f32, rows padded to TrainAttentionScoreStride; the tile's f32 output), and for the backward pass the rows' dO·O and the head-major
// f32 dK and dV of the whole micro-batch. Each buffer is rounded up to 256 bytes.
#pragma once

#include <algorithm>
#include <cstdint>

namespace gk {

inline constexpr int64_t kTrainAttentionTileRows = 256;

inline uint64_t WorkspaceAlign(uint64_t n) { return (n + 255) / 256 * 256; }

// The row stride of a tile's score matrices (S, P, dS, dP) over ctx keys: a multiple of 8
// elements, so that every head's matrix in a batched product starts 16-byte aligned, as
// cuBLASLt's algorithms were chosen to assume (kernels/cuda/gemm.cc).
inline int64_t TrainAttentionScoreStride(int64_t ctx) { return (ctx + 7) / 8 * 8; }

// N query heads, K KV heads, head dim H, T tokens; op_bytes 4 (f32 operands) or 2 (bf16).
inline uint64_t TrainAttentionTileBytes(int64_t N, int64_t K, int64_t H, int64_t T, int op_bytes) {
  const uint64_t n = uint64_t(N), k = uint64_t(K), h = uint64_t(H), ctx = uint64_t(T), es = uint64_t(op_bytes);
  const uint64_t tq = uint64_t(std::min(kTrainAttentionTileRows, T)), ld = uint64_t(TrainAttentionScoreStride(T));
  return 2 * WorkspaceAlign(n * tq * h * es) + 2 * WorkspaceAlign(k * ctx * h * es) + 2 * WorkspaceAlign(n * tq * ld * es) +
         2 * WorkspaceAlign(n * tq * ld * 4) + WorkspaceAlign(n * tq * h * 4);
}
inline uint64_t TrainAttentionBackwardExtraBytes(int64_t N, int64_t K, int64_t H, int64_t T) {
  return WorkspaceAlign(uint64_t(N) * uint64_t(T) * 4) + 2 * uint64_t(K) * uint64_t(T) * uint64_t(H) * 4;
}

}  // namespace gk
