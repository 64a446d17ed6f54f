// Attention of a long run of one sequence's new tokens (a prefill chunk) on the GPU through
// tensor-core products, the route llama.cpp's CUDA backend takes without FlashAttention: per
// tile of at most 512 query rows, the visible K rows are gathered from the paged pool into one
// contiguous block (V transposed), then per KV head
//   S = scale · Q · Kᵀ   (cuBLASLt, batched over KV heads: a GQA group's query heads are rows)
//   P = softmax(S) with the causal / sliding-window mask   (one kernel, f32, exact max-subtracted)
//   O = P · V            (cuBLASLt)
// and O is written back to the token-major rows. Operands are in the cache's precision: f32 for
// an f32 pool, bf16 for bf16, f16 for f16 and fp8 (exact for both fp8 formats); S and O are f32.
// Short runs (decode steps) take kernels/cuda/paged_attention.h instead.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/cuda_memory.h"
#include "kernels/cuda/gemm.h"
#include "tensor/dtype.h"
#include "util/result.h"

namespace gk::cuda {

struct PrefillAttentionArgs {
  const float* q = nullptr;  // the pass's queries (rows, N, H); rows [t0, t0 + T) are this run's
  float* out = nullptr;      // the pass's outputs, same layout
  int64_t t0 = 0, T = 0;
  int64_t first = 0;         // position of row t0 (rows are consecutive positions)
  const int32_t* table = nullptr;  // the sequence's block table (device)
  int num_heads = 0, kv_heads = 0, head_dim = 0;
  float scale = 1.f;
  int window = 0;  // 0: every earlier position; else the last `window`
  int block_size = 0;
  const std::byte* k_pool = nullptr;
  const std::byte* v_pool = nullptr;
  DType dtype = DType::kF16;  // the pool's
};

class PrefillAttention {
 public:
  // Queued on `stream` (gemm's); the workspace grows to the largest tile seen.
  Status Run(const PrefillAttentionArgs& a, GemmRunner& gemm, cudaStream_t stream);

 private:
  DeviceBuffer<std::byte> workspace_;
};

// Query rows per tile, at most; fewer where a tile's score and probability matrices (heads ×
// rows × context) would pass kPrefillScoreBytes, so that a long context cannot ask for gigabytes
// of workspace beside a full KV pool.
inline constexpr int64_t kPrefillTileRows = 512;
inline constexpr uint64_t kPrefillScoreBytes = uint64_t(1) << 30;

}  // namespace gk::cuda
