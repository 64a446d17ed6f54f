// Products of bf16 weights with a few rows of activations (decode steps at small batch), written
// here beside cuBLASLt's: y (T × rows) = x (T × cols, f32) · Wᵀ, or y += with accumulate. At one
// to eight rows of x the product is a stream of the weights: every warp reads four rows of W in
// 16-byte loads, once, and keeps their T sums; x (a few KB) comes from the cache, each element
// read once for the four rows. In the round mode x
// is rounded to bf16 first, as GemmRunner::Run's staging does; otherwise it is used as f32 (more
// exact than the split mode's two terms). f32 sums; the order differs from cuBLASLt's.
// GemmRunner takes this route where set_small_batch_gemv asks for it (CudaModelOptions::
// gemv_max_tokens, `bench model --decode-products gemv`): a GPU run says which is faster.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "util/result.h"

namespace gk::cuda {

inline constexpr int kGemvMaxTokens = 8;

// Whether GemvBf16 takes the product: 1 ≤ T ≤ kGemvMaxTokens, cols a multiple of 8, w and x
// 16-byte aligned (the weight rows then are too).
bool GemvSupports(const void* w, const float* x, int64_t cols, int64_t T);

Status GemvBf16(const uint16_t* w, int64_t rows, int64_t cols, const float* x, int64_t T, float* y, bool round_x,
                bool accumulate, cudaStream_t stream);

}  // namespace gk::cuda
