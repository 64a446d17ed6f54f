// Reductions across a warp and across a thread block, for the kernels under kernels/cuda/ (one
// copy of the shuffle trees). Block reductions take blocks of a power-of-two size up to
// kMaxBlock threads; every thread gets the result, and they may be called again at once.
#pragma once

#include <cmath>
#include <cstdint>

namespace gk::cuda {

inline constexpr int kMaxBlock = 256;

__device__ inline float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ inline float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The block's sum (kMax: its largest value) of each thread's v.
template <bool kMax = false>
__device__ inline float BlockReduce(float v) {
  __shared__ float partial[kMaxBlock / 32];
  __shared__ float total;
  v = kMax ? WarpMax(v) : WarpSum(v);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    float r = threadIdx.x < blockDim.x / 32 ? partial[threadIdx.x] : (kMax ? -INFINITY : 0.f);
    r = kMax ? WarpMax(r) : WarpSum(r);
    if (threadIdx.x == 0) total = r;
  }
  __syncthreads();
  const float r = total;
  __syncthreads();  // `partial` and `total` are free for the next call
  return r;
}
__device__ inline float BlockSum(float v) { return BlockReduce<false>(v); }
__device__ inline float BlockMax(float v) { return BlockReduce<true>(v); }

// 1 / sqrt(mean(row²) + eps) of a row of n floats, the block's threads sharing the sum (RMSNorm).
__device__ inline float RowInvRms(const float* row, int64_t n, float eps) {
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) ss += row[i] * row[i];
  return rsqrtf(BlockSum(ss) / float(n) + eps);
}

// The block's largest value and, among equal ones, the lowest index; `none` marks a thread
// that holds no candidate (it never wins over one). Returns the index; every thread gets it.
__device__ inline int64_t BlockArgMax(float v, int64_t i, int64_t none) {
  __shared__ float vals[kMaxBlock];
  __shared__ int64_t idx[kMaxBlock];
  vals[threadIdx.x] = v;
  idx[threadIdx.x] = i;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      const float ov = vals[threadIdx.x + s];
      const int64_t oi = idx[threadIdx.x + s];
      const int64_t mi = idx[threadIdx.x];
      if (oi != none && (mi == none || ov > vals[threadIdx.x] || (ov == vals[threadIdx.x] && oi < mi))) {
        vals[threadIdx.x] = ov;
        idx[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  const int64_t r = idx[0];
  __syncthreads();
  return r;
}

}  // namespace gk::cuda
