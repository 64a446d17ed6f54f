// Attention of the training step on the GPU, forward and backward, for the GPU trainer (issue
// "CUDA training"). The micro-batch is packed: its rows are concatenated into T tokens, and a
// token sees the earlier tokens of its own row only (causal; sliding-window layers the last
// `window` of them). Queries (T, N, H), keys and values (T, K, H), token-major, f32.
//
// FlashAttention-2's arithmetic through library products, tile by tile of query rows: the
// forward pass keeps only O and each row's log-sum-exp; the backward pass recomputes
// P = exp(scale·Q·Kᵀ − lse) from them, then
//   dV = Pᵀ·dO,  dP = dO·Vᵀ,  dS = P ∘ (dP − rowsum(dO ∘ O)),  dQ = scale·dS·K,  dK = scale·dSᵀ·Q,
// each product batched over the KV heads with a GQA group's query heads as rows (so dK and dV
// sum over the group), through cuBLASLt: f32 operands (TF32 off) for the f32 trainer's
// precision, or bf16 operands with f32 accumulation. Scores live only for one tile of
// kTrainTileRows queries at a time (N × tile × context floats), never T × T per head.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "kernels/attention_train_workspace.h"
#include "kernels/cuda/cuda_memory.h"
#include "kernels/cuda/gemm.h"
#include "tensor/dtype.h"
#include "util/result.h"

namespace gk::cuda {

struct TrainAttentionArgs {
  int64_t T = 0;
  // Per token, the index of its row's first token: on the device for the kernels, and the same
  // numbers on the host for the tiles' key ranges.
  const int32_t* row_start = nullptr;
  std::span<const int32_t> host_row_start;
  int num_heads = 0, kv_heads = 0, head_dim = 0;
  float scale = 1.f;
  int window = 0;               // 0: every earlier token of the row; else the last `window`
  DType dtype = DType::kF32;    // the products' operands: kF32 or kBF16
  const float* q = nullptr;     // (T, N, H)
  const float* k = nullptr;     // (T, K, H)
  const float* v = nullptr;     // (T, K, H)
  float* out = nullptr;         // (T, N, H): forward's output, backward's input
  float* lse = nullptr;         // (N, T): forward's output, backward's input
};

inline constexpr int64_t kTrainTileRows = kTrainAttentionTileRows;

class TrainAttention {
 public:
  // out and lse from q, k, v. Queued on `stream` (gemm's).
  Status Forward(const TrainAttentionArgs& a, GemmRunner& gemm, cudaStream_t stream);
  // dq (T, N, H), dk and dv (T, K, H), all overwritten, from dout (T, N, H) and the forward's
  // out and lse.
  Status Backward(const TrainAttentionArgs& a, const float* dout, float* dq, float* dk, float* dv, GemmRunner& gemm,
                  cudaStream_t stream);

 private:
  Result<std::byte*> Workspace(uint64_t bytes, cudaStream_t stream);
  DeviceBuffer<std::byte> workspace_;
};

}  // namespace gk::cuda
