// The rest of the decoder's per-token work on the GPU, beside row_ops.h: RoPE from a
// host-computed cos/sin table, the paged KV write in
// the pool's dtype, row gathers and bf16 conversion. Same formulas as kernels/ops.h and
// PagedKvPool::Write (f32 arithmetic; f16 and fp8 saturate, every conversion rounds to nearest
// even). Pointers are device memory; each call queues one kernel on `stream`.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"
#include "util/result.h"

namespace gk::cuda {

// x[i] *= s.
Status ScaleRows(float* x, int64_t n, float s, cudaStream_t stream);
// x[i] = (x[i] + y[i]) · s.
Status AddScale(float* x, const float* y, int64_t n, float s, cudaStream_t stream);
// Mixture-of-experts routing of T tokens over E experts (GemmaModel::MoeBlock): per token the
// softmax of its router logits, the k most likely experts (the lower index first among equal
// ones), their probabilities renormalised over the k and times per_expert_scale.
// expert[t·k + j], weight[t·k + j]: the token's j-th choice.
Status RouteTopK(const float* logits, int64_t T, int E, int k, const float* per_expert_scale, int32_t* expert,
                 float* weight, cudaStream_t stream);
// out[i] = x[rows[i]] for n rows of D (the tokens routed to one expert).
// y[rows[i]] += weight[i] · x[i] for n rows of D; rows distinct within one call.
Status ScatterAddRows(const float* x, int64_t D, const int32_t* rows, const float* weight, int64_t n, float* y,
                      cudaStream_t stream);
// Rotate-half RoPE of T tokens' `heads` rows of H: cos_sin holds per token H floats, the H/2
// cosines then the H/2 sines (kernels/ops.h's RopeCosSin layout).
// inverse: the rotation by −θ, RoPE's backward pass (the gradient through RopeRows).
Status RopeRows(float* x, int64_t T, int64_t heads, int64_t H, const float* cos_sin, cudaStream_t stream,
                bool inverse = false);
// out[r] = the index of the largest of row r's n floats, the lowest among equal ones (ArgMax).
Status ArgMaxRows(const float* x, int64_t rows, int64_t n, int32_t* out, cudaStream_t stream);
// out[i] = x[rows[i]] for n_rows rows of D floats.
Status GatherRows(const float* x, int64_t D, const int32_t* rows, int64_t n_rows, float* out, cudaStream_t stream);
// out[t] = table[tokens[t]] · scale for bf16 or f32 tables of D columns; ids outside [0, rows)
// (after subtracting nothing) give zero rows. `fallback`: where an id is >= rows, use this row
// instead if it is in range (the PLE table's pad row), else zeros.
Status EmbedRows(const void* table, DType dtype, int64_t rows, int64_t D, const int32_t* tokens, int64_t T,
                 float scale, int32_t fallback, float* out, cudaStream_t stream);

// Where each new token's K/V go in a paged pool: per token, its position and the offset of its
// sequence's block table in `tables` (a table maps logical block pos / block_size to a pool block).
struct PagedTokens {
  const int32_t* pos = nullptr;
  const int32_t* table_offset = nullptr;
  const int32_t* tables = nullptr;
};

// One pass's q, k and v after their products, in one kernel: q's heads RMSNormed (q_norm, or no
// weight) and rotated (RopeRows) into q_out (T, heads, H); K's and V's heads into one layer's
// pool regions (layout of model/paged_kv.h: [block][kv_head][slot][H]) converted to dtype (kF32,
// kF16, kBF16, kFp8E4m3, kFp8E5m2): RopeRows(RmsNormRows(k; k_norm)) and RmsNormRows(v) without
// a weight (v_norm: Gemma 4; else v as it is). Token t's q heads start at q + t·q_ld, its K and V
// heads at k + t·kv_ld and v + t·kv_ld: apart, or the columns of one q|k|v product. v null: V is
// k as it comes (K=V layers: V is the raw K projection). kv_heads 0: q alone (a layer that reads
// another's KV). q may be q_out (then q_ld = heads·H); k and v are only read.
struct QkvNormWrite {
  int64_t T = 0;
  int H = 0;
  float eps = 1e-6f;
  const float* cos_sin = nullptr;  // per token H floats (RopeRows)
  int heads = 0;
  const float* q = nullptr;
  int64_t q_ld = 0;
  float* q_out = nullptr;
  const float* q_norm = nullptr;
  int kv_heads = 0;
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t kv_ld = 0;
  const float* k_norm = nullptr;
  bool v_norm = false;
  PagedTokens tokens;
  int block_size = 0;
  DType dtype = DType::kF32;
  std::byte* k_pool = nullptr;
  std::byte* v_pool = nullptr;
};
Status NormRopeAndKvWrite(const QkvNormWrite& a, cudaStream_t stream);

}  // namespace gk::cuda
