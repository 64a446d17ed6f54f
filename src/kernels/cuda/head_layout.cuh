// Token rows (T, heads, H) to head-major matrices [heads][n][H] and back, for the attention
// passes that run their products per head through cuBLASLt (attention_prefill.cu,
// attention_train.cu). Each kernel file gets its own copy (the anonymous namespace).
#pragma once

#include <cstdint>

#include "kernels/cuda/kv_convert.cuh"

namespace gk::cuda {
namespace {

// Grid (n, heads): rows r0 .. r0 + n of src (T, heads, H), times scale, into dst [heads][n][H]
// in the products' operand type.
template <class Op>
__global__ void ToHeadsKernel(const float* src, int64_t r0, int64_t n, int heads, int H, float scale, Op* dst) {
  const int64_t t = blockIdx.x;
  const int h = blockIdx.y;
  const float* s = src + ((r0 + t) * heads + h) * H;
  Op* d = dst + (int64_t(h) * n + t) * H;
  for (int c = threadIdx.x; c < H; c += blockDim.x) d[c] = ToOperand<Op>(s[c] * scale);
}

// Grid (n, heads): the inverse, in f32: src [heads][n][H] over rows r0 .. r0 + n of dst (T, heads, H).
__global__ void FromHeadsKernel(const float* src, int64_t r0, int64_t n, int heads, int H, float* dst) {
  const int64_t t = blockIdx.x;
  const int h = blockIdx.y;
  const float* s = src + (int64_t(h) * n + t) * H;
  float* d = dst + ((r0 + t) * heads + h) * H;
  for (int c = threadIdx.x; c < H; c += blockDim.x) d[c] = s[c];
}

}  // namespace
}  // namespace gk::cuda
