#include "kernels/cuda/row_ops.h"

#include <algorithm>

#include "kernels/cuda/bf16_staging.cuh"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_memory.h"

namespace gk::cuda {
namespace {

constexpr int kThreads = 256;

// One block per row: the row's 1/rms by a block reduction, then the scaled row (and its bf16
// terms). xr is the block's row; y and staged are the whole output, of which it writes row
// blockIdx.x.
__device__ void NormRow(const float* xr, const float* w, int64_t n, float eps, float* y, const Bf16Staging& staged) {
  const float inv = RowInvRms(xr, n, eps);
  const int64_t at = blockIdx.x * n;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = w ? xr[i] * inv * w[i] : xr[i] * inv;
    y[at + i] = v;
    if (staged.hi) StageBf16(staged, at + i, v);
  }
}

__global__ void RmsNormKernel(const float* x, const float* w, int64_t n, float eps, float* y, Bf16Staging staged) {
  NormRow(x + blockIdx.x * n, w, n, eps, y, staged);
}

// x[r] = (x[r] + RMSNorm(y[r]) · w) · scale, then the next norm of the new row if asked.
__global__ void RmsNormAddKernel(const float* y, const float* w, int64_t n, float eps, float* x, float scale, ThenNorm then) {
  const float* yr = y + blockIdx.x * n;
  float* xr = x + blockIdx.x * n;
  const float inv = RowInvRms(yr, n, eps);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = xr[i] + yr[i] * inv * w[i];
    xr[i] = scale == 1.f ? v : v * scale;
  }
  if (then.out == nullptr) return;
  __syncthreads();  // the whole row, written by the whole block
  NormRow(xr, then.w, n, eps, then.out, then.staged);
}

__device__ float GeluTanh(float x) {
  constexpr float kC = 0.7978845608028654f;  // sqrt(2/pi)
  return 0.5f * x * (1.f + tanhf(kC * (x + 0.044715f * x * x * x)));
}

__global__ void GeluTanhMulKernel(const float* gate, const float* up, int64_t n, float* out, Bf16Staging staged) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = GeluTanh(gate[i]) * up[i];
    out[i] = v;
    if (staged.hi) StageBf16(staged, i, v);
  }
}

__global__ void SoftcapKernel(float* x, int64_t n, float cap) {
  const float inv = 1.f / cap;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    x[i] = cap * tanhf(x[i] * inv);
  }
}

// One block per row of strided gate, up and out rows.
__global__ void GeluTanhMulRowsKernel(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride,
                                      int64_t n, float* out, int64_t out_stride, Bf16Staging staged) {
  const float* g = gate + blockIdx.x * gate_stride;
  const float* u = up + blockIdx.x * up_stride;
  const int64_t at = blockIdx.x * out_stride;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float v = GeluTanh(g[i]) * u[i];
    out[at + i] = v;
    if (staged.hi) StageBf16(staged, at + i, v);
  }
}

int Blocks(int64_t n) { return int(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535)); }

}  // namespace

Status RmsNormRows(const float* x, const float* w, int64_t rows, int64_t n, float eps, float* y, cudaStream_t stream,
                   Bf16Staging staged) {
  if (rows == 0) return Status::Ok();
  RmsNormKernel<<<unsigned(rows), kThreads, 0, stream>>>(x, w, n, eps, y, staged);
  return CheckLaunch("RmsNormKernel");
}

Status GeluTanhMul(const float* gate, const float* up, int64_t n, float* out, cudaStream_t stream, Bf16Staging staged) {
  if (n == 0) return Status::Ok();
  GeluTanhMulKernel<<<Blocks(n), kThreads, 0, stream>>>(gate, up, n, out, staged);
  return CheckLaunch("GeluTanhMulKernel");
}

Status Softcap(float* x, int64_t n, float cap, cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  SoftcapKernel<<<Blocks(n), kThreads, 0, stream>>>(x, n, cap);
  return CheckLaunch("SoftcapKernel");
}

Status RmsNormAddRows(const float* y, const float* w, int64_t rows, int64_t n, float eps, float* x, cudaStream_t stream,
                      float scale, const ThenNorm& then) {
  if (rows == 0) return Status::Ok();
  RmsNormAddKernel<<<unsigned(rows), kThreads, 0, stream>>>(y, w, n, eps, x, scale, then);
  return CheckLaunch("RmsNormAddKernel");
}

Status GeluTanhMulRows(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride, int64_t rows,
                       int64_t n, float* out, int64_t out_stride, cudaStream_t stream, Bf16Staging staged) {
  if (rows == 0) return Status::Ok();
  GeluTanhMulRowsKernel<<<unsigned(rows), kThreads, 0, stream>>>(gate, gate_stride, up, up_stride, n, out, out_stride,
                                                                  staged);
  return CheckLaunch("GeluTanhMulRowsKernel");
}

}  // namespace gk::cuda
