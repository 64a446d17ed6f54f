// Attention over a paged KV pool on the GPU, for decode steps and short chunks: each new
// token's query heads attend over the token's visible positions (causal; sliding-window layers
// only the last `window`), read through its sequence's block table from the pool regions of
// model/paged_kv.h in the pool's dtype. The CUDA twin of GemmaModel::Attend over
// kernels/attention.h: f32 scores, an exact max-subtracted online softmax, f32 output.
//
// One thread block per (token, KV head, split): the block stages tiles of 16 positions' K and V
// rows in shared memory, read once for the whole GQA group (up to 16 query heads, spread over
// its four warps), and keeps each head's running max, sum and output in registers. Long
// contexts with few tokens (a decode step at batch 1) are cut into `splits` ranges of positions
// whose partial states a second kernel merges (flash-decoding), so every multiprocessor streams
// part of the cache. Groups of more than 16 heads take a simpler kernel, one block per query
// head. Prefill chunks take kernels/cuda/attention_prefill.h (tensor-core products).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/bf16_staging.h"
#include "kernels/cuda/decoder_ops.h"
#include "tensor/dtype.h"
#include "util/result.h"

namespace gk::cuda {

struct PagedAttentionArgs {
  const float* q = nullptr;  // (T, N, H)
  float* out = nullptr;      // (T, N, H)
  int64_t T = 0;
  const int32_t* rows = nullptr;  // the tokens to attend for (T of them, device); null: tokens 0..T-1
  int num_heads = 0;   // N
  int kv_heads = 0;    // K: query head h reads kv head h / (N / K)
  int head_dim = 0;    // H, at most kMaxHeadDim
  float scale = 1.f;
  int window = 0;      // 0: every earlier position; else the last `window` positions
  PagedTokens tokens;  // each token's position and block table
  int block_size = 0;
  const std::byte* k_pool = nullptr;  // the layer's K region
  const std::byte* v_pool = nullptr;
  DType dtype = DType::kF16;  // kF32, kF16, kBF16, kFp8E4m3 or kFp8E5m2
  int splits = 1;              // ranges of positions per token, merged after (1: none)
  // 0: each token's visible positions cut into `splits` even ranges; else into ranges of this
  // many from the first visible one, whatever the other tokens' contexts (batch-invariant: a
  // token's sums then do not depend on its batch; splits must cover the longest: trailing
  // ranges of shorter contexts are empty, and weigh nothing in the merge).
  int split_positions = 0;
  float* workspace = nullptr;  // splits > 1: PagedAttentionWorkspaceFloats floats (device)
  Bf16Staging out_staged;      // out's bf16 terms too, for o_proj's product (hi null: none)
};

inline constexpr int kMaxHeadDim = 512;

Status PagedAttention(const PagedAttentionArgs& a, cudaStream_t stream);

// Floats of the partial states a.splits > 1 needs (each [m, l, o]: softmax_state.cuh).
inline int64_t PagedAttentionWorkspaceFloats(const PagedAttentionArgs& a) {
  return a.splits > 1 ? a.T * a.num_heads * a.splits * (a.head_dim + 2) : 0;
}
// Splits that give about two blocks per multiprocessor for `rows` tokens of kv_heads heads, each
// split at least 128 positions of the longest context, at most 64.
int PagedAttentionSplits(int64_t rows, int kv_heads, int64_t max_positions, int multiprocessors);
// Batch-invariant splitting: the range length for contexts of at most `longest_possible`
// positions (the model's, not the batch's), at least 256 and at most 16 ranges; and the ranges
// that cover `max_positions` at that length.
int BatchInvariantSplitPositions(int64_t longest_possible);
int BatchInvariantSplits(int64_t max_positions, int split_positions);

}  // namespace gk::cuda
