#include "kernels/cuda/row_ops.h"

#include <algorithm>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_memory.h"

namespace gk::cuda {
namespace {

constexpr int kThreads = 256;

// One block per row: the row's 1/rms by a block reduction, then the scaled row.
__global__ void RmsNormKernel(const float* x, const float* w, int64_t n, float eps, float* y) {
  const float* xr = x + blockIdx.x * n;
  float* yr = y + blockIdx.x * n;
  const float inv = RowInvRms(xr, n, eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) yr[i] = w ? xr[i] * inv * w[i] : xr[i] * inv;
}

__device__ float GeluTanh(float x) {
  constexpr float kC = 0.7978845608028654f;  // sqrt(2/pi)
  return 0.5f * x * (1.f + tanhf(kC * (x + 0.044715f * x * x * x)));
}

__global__ void GeluTanhMulKernel(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    out[i] = GeluTanh(gate[i]) * up[i];
  }
}

__global__ void SoftcapKernel(float* x, int64_t n, float cap) {
  const float inv = 1.f / cap;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    x[i] = cap * tanhf(x[i] * inv);
  }
}

__global__ void EmbedKernel(const uint16_t* table, int64_t rows, int64_t D, const int32_t* tokens, float scale,
                            float* out) {
  const int32_t id = tokens[blockIdx.x];
  float* o = out + blockIdx.x * D;
  const bool valid = id >= 0 && id < rows;
  const uint16_t* row = table + (valid ? int64_t(id) * D : 0);
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    o[i] = valid ? __uint_as_float(uint32_t(row[i]) << 16) * scale : 0.f;
  }
}

int Blocks(int64_t n) { return int(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535)); }

}  // namespace

Status RmsNormRows(const float* x, const float* w, int64_t rows, int64_t n, float eps, float* y, cudaStream_t stream) {
  if (rows == 0) return Status::Ok();
  RmsNormKernel<<<unsigned(rows), kThreads, 0, stream>>>(x, w, n, eps, y);
  return CheckLaunch("RmsNormKernel");
}

Status GeluTanhMul(const float* gate, const float* up, int64_t n, float* out, cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  GeluTanhMulKernel<<<Blocks(n), kThreads, 0, stream>>>(gate, up, n, out);
  return CheckLaunch("GeluTanhMulKernel");
}

Status Softcap(float* x, int64_t n, float cap, cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  SoftcapKernel<<<Blocks(n), kThreads, 0, stream>>>(x, n, cap);
  return CheckLaunch("SoftcapKernel");
}

Status EmbedRowsBf16(const uint16_t* table, int64_t rows, int64_t D, const int32_t* tokens, int64_t T, float scale,
                     float* out, cudaStream_t stream) {
  if (T == 0) return Status::Ok();
  EmbedKernel<<<unsigned(T), kThreads, 0, stream>>>(table, rows, D, tokens, scale, out);
  return CheckLaunch("EmbedKernel");
}

}  // namespace gk::cuda
