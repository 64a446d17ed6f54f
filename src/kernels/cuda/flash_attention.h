// Attention of a prefill chunk in one fused kernel, FlashAttention-2 style: a block of 4 warps
// per (32 query rows, query head) walks the visible positions in tiles of 32, reading K and V
// straight from the paged pool through the block table, and keeps S = Q·Kᵀ, the online softmax's
// running max and sum, and O in shared memory: no score matrix in device memory, whatever the
// context length. The products are tensor-core WMMA (16×16×16) with f32 accumulation; operands are
// bf16 for a bf16 pool, f16 for f16 and both fp8 pools (exact for fp8), and the queries are
// rounded to the same type. Causal, sliding window, GQA, head dims that are multiples of 16 up to
// 512. f32 pools keep kernels/cuda/attention_prefill.h (f32 products).
//
// The alternative to attention_prefill.h's route through cuBLASLt (CudaModelOptions::
// prefill_attention): which is faster on a given GPU is for the benchmark to say.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/attention_prefill.h"
#include "util/result.h"

namespace gk::cuda {

// Whether the fused kernel takes a pool of this dtype and heads of this size.
bool FlashPrefillSupports(DType pool_dtype, int head_dim);
// Queued on `stream`; same arguments and result as PrefillAttention::Run.
Status FlashPrefillAttention(const PrefillAttentionArgs& a, cudaStream_t stream);

}  // namespace gk::cuda
