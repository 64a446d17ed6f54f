// Attention over a paged KV pool on the GPU, for prefill chunks and decode steps alike: each new
// token's query heads attend over the token's visible positions (causal; sliding-window layers
// only the last `window`), read through its sequence's block table from the pool regions of
// model/paged_kv.h in the pool's dtype. The CUDA twin of GemmaModel::Attend over
// kernels/attention.h: f32 scores, an exact max-subtracted online softmax, f32 output.
//
// This is the simple, correct kernel ("correct first"): one thread block per (token, query
// head), its four warps taking every fourth position, merged at the end. It reads K/V once per
// query head rather than once per GQA group, and uses no tensor cores: the tiled prefill kernel
// and the split-K decode kernel of the CUDA backend issue replace it where it is slow.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

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
};

inline constexpr int kMaxHeadDim = 512;

Status PagedAttention(const PagedAttentionArgs& a, cudaStream_t stream);

}  // namespace gk::cuda
