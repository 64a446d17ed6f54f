#include "kernels/cuda/train_ops.h"

#include <algorithm>

#include "kernels/cuda/cuda_memory.h"
#include "kernels/train_ops.h"

namespace gk::cuda {
namespace {

constexpr int kThreads = 256;

int Blocks(int64_t n) { return int(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, 65535)); }

__device__ double WarpSumD(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The block's sum of each thread's v (kThreads threads), in double; every thread gets it.
__device__ double BlockSumD(double v) {
  __shared__ double partial[kThreads / 32];
  __shared__ double total;
  v = WarpSumD(v);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    double r = threadIdx.x < kThreads / 32 ? partial[threadIdx.x] : 0.0;
    r = WarpSumD(r);
    if (threadIdx.x == 0) total = r;
  }
  __syncthreads();
  const double r = total;
  __syncthreads();
  return r;
}

__global__ void RmsNormBackwardKernel(const float* x, const float* w, int64_t n, float eps, const float* dy, float* dx,
                                     bool accumulate) {
  const float* xr = x + blockIdx.x * n;
  const float* dyr = dy + blockIdx.x * n;
  float* dxr = dx + blockIdx.x * n;
  double ss = 0, gx = 0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    ss += double(xr[i]) * xr[i];
    gx += double(dyr[i]) * (w ? w[i] : 1.f) * xr[i];
  }
  ss = BlockSumD(ss);
  gx = BlockSumD(gx);
  const double r = 1.0 / sqrt(ss / double(n) + double(eps));
  const float a = float(r), b = float(r * r * r * gx / double(n));
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    const float g = dyr[i] * (w ? w[i] : 1.f);
    const float v = __fsub_rn(__fmul_rn(a, g), __fmul_rn(b, xr[i]));
    dxr[i] = accumulate ? dxr[i] + v : v;
  }
}

// out = gelu_tanh(x)·u: *dx = g·u·gelu'(x), *du = g·gelu(x).
__device__ void GeluTanhMulGrad(float x, float u, float g, float* dx, float* du) {
  constexpr float kC = 0.7978845608028654f;  // sqrt(2/pi)
  const float x2 = x * x;
  const float t = tanhf(kC * (x + 0.044715f * x * x2));
  const float gelu = 0.5f * x * (1.f + t);
  const float d = 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * kC * (1.f + 3.f * 0.044715f * x2);
  *dx = g * u * d;
  *du = g * gelu;
}

__global__ void GeluTanhMulBackwardKernel(const float* gate, const float* up, const float* dout, int64_t n, float* dgate,
                                          float* dup) {
  for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < n; i += int64_t(gridDim.x) * kThreads) {
    GeluTanhMulGrad(gate[i], up[i], dout[i], dgate + i, dup + i);
  }
}

// One block per row: the fused gate|up rows of the MoE experts (row strides).
__global__ void GeluTanhMulBackwardRowsKernel(const float* gate, const float* up, int64_t in_stride, const float* dout,
                                              int64_t dout_stride, int64_t n, float* dgate, float* dup,
                                              int64_t out_stride) {
  const int64_t r = blockIdx.x;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) {
    GeluTanhMulGrad(gate[r * in_stride + i], up[r * in_stride + i], dout[r * dout_stride + i],
                    dgate + r * out_stride + i, dup + r * out_stride + i);
  }
}

// One block per slot i: deo_i = w_i · dy[token_i], dw_i = dy[token_i] · eo_i (in double).
__global__ void MoeSlotBackwardKernel(const float* dy, int64_t D, const int32_t* token, const float* weight,
                                      const float* eo, float* deo, float* dw) {
  const int64_t i = blockIdx.x;
  const float* g = dy + int64_t(token[i]) * D;
  const float* o = eo + i * D;
  float* d = deo + i * D;
  const float w = weight[i];
  double dot = 0;
  for (int64_t j = threadIdx.x; j < D; j += kThreads) {
    dot += double(g[j]) * o[j];
    d[j] = w * g[j];
  }
  dot = BlockSumD(dot);
  if (threadIdx.x == 0) dw[i] = float(dot);
}

__global__ void CrossEntropyGradKernel(float* z, int64_t n, const float* lse, const int32_t* target, int64_t v0, float cap,
                                       float scale) {
  float* zr = z + blockIdx.x * n;
  const float l = lse[blockIdx.x];
  const int64_t tg = int64_t(target[blockIdx.x]) - v0;  // outside [0, n): in another chunk
  for (int64_t j = threadIdx.x; j < n; j += kThreads) {
    const float th = cap > 0.f ? zr[j] / cap : 0.f;
    zr[j] = (expf(zr[j] - l) - (j == tg ? 1.f : 0.f)) * (1.f - th * th) * scale;
  }
}

template <bool kBackward>
__global__ void DropoutKernel(const float* x, int64_t n, uint64_t key, float p, float* out) {
  const float keep_scale = 1.f / (1.f - p);
  for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < n; i += int64_t(gridDim.x) * kThreads) {
    const bool keep = CounterUniform(key, uint64_t(i)) >= p;
    if (kBackward) {
      if (keep) out[i] += x[i] * keep_scale;
    } else {
      out[i] = keep ? x[i] * keep_scale : 0.f;
    }
  }
}

__global__ void SumOfSquaresKernel(const float* g, int64_t n, double* sum_sq) {
  double s = 0;
  for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < n; i += int64_t(gridDim.x) * kThreads) {
    s += double(g[i]) * double(g[i]);
  }
  s = BlockSumD(s);
  if (threadIdx.x == 0) atomicAdd(sum_sq, s);
}

__global__ void ScaleKernel(float* g, int64_t n, float s) {
  for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < n; i += int64_t(gridDim.x) * kThreads) g[i] *= s;
}

// AdamW::Step's arithmetic, operation by operation, each rounded as the CPU rounds it (no
// fused multiply-adds), so that both give the same bits.
__global__ void AdamWKernel(float* p, const float* g, float* m, float* v, int64_t n, AdamWUpdate u) {
  const double c1 = 1.0 - u.beta1, c2 = 1.0 - u.beta2;
  for (int64_t i = blockIdx.x * int64_t(kThreads) + threadIdx.x; i < n; i += int64_t(gridDim.x) * kThreads) {
    const double gi = g[i];
    const double mi = __dadd_rn(__dmul_rn(u.beta1, double(m[i])), __dmul_rn(c1, gi));
    const double vi = __dadd_rn(__dmul_rn(u.beta2, double(v[i])), __dmul_rn(__dmul_rn(c2, gi), gi));
    m[i] = float(mi);
    v[i] = float(vi);
    const double pi = p[i];
    const double denom = __dadd_rn(__dmul_rn(__dsqrt_rn(vi), u.inv_bc2_sqrt), u.eps);
    p[i] = float(__dsub_rn(__dsub_rn(pi, __dmul_rn(u.decay, pi)), __ddiv_rn(__dmul_rn(u.step_size, mi), denom)));
  }
}

}  // namespace

Status RmsNormBackwardRows(const float* x, const float* w, int64_t rows, int64_t n, float eps, const float* dy,
                           float* dx, bool accumulate, cudaStream_t stream) {
  if (rows == 0) return Status::Ok();
  RmsNormBackwardKernel<<<unsigned(rows), kThreads, 0, stream>>>(x, w, n, eps, dy, dx, accumulate);
  return CheckLaunch("RmsNormBackwardKernel");
}

Status GeluTanhMulBackward(const float* gate, const float* up, const float* dout, int64_t n, float* dgate, float* dup,
                           cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  GeluTanhMulBackwardKernel<<<Blocks(n), kThreads, 0, stream>>>(gate, up, dout, n, dgate, dup);
  return CheckLaunch("GeluTanhMulBackwardKernel");
}

Status GeluTanhMulBackwardRows(const float* gate, const float* up, int64_t in_stride, const float* dout,
                               int64_t dout_stride, int64_t rows, int64_t n, float* dgate, float* dup, int64_t out_stride,
                               cudaStream_t stream) {
  if (rows == 0) return Status::Ok();
  GeluTanhMulBackwardRowsKernel<<<unsigned(rows), kThreads, 0, stream>>>(gate, up, in_stride, dout, dout_stride, n, dgate,
                                                                         dup, out_stride);
  return CheckLaunch("GeluTanhMulBackwardRowsKernel");
}

Status MoeSlotBackward(const float* dy, int64_t D, const int32_t* token, const float* weight, const float* eo, int64_t n,
                       float* deo, float* dw, cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  MoeSlotBackwardKernel<<<unsigned(n), kThreads, 0, stream>>>(dy, D, token, weight, eo, deo, dw);
  return CheckLaunch("MoeSlotBackwardKernel");
}

Status CrossEntropyGradRows(float* z, int64_t rows, int64_t n, const float* lse, const int32_t* target, int64_t v0,
                            float cap, float scale, cudaStream_t stream) {
  if (rows == 0) return Status::Ok();
  CrossEntropyGradKernel<<<unsigned(rows), kThreads, 0, stream>>>(z, n, lse, target, v0, cap, scale);
  return CheckLaunch("CrossEntropyGradKernel");
}

Status LoraDropout(const float* x, int64_t n, uint64_t key, float p, float* out, cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  DropoutKernel<false><<<Blocks(n), kThreads, 0, stream>>>(x, n, key, p, out);
  return CheckLaunch("DropoutKernel");
}

Status LoraDropoutBackwardAdd(const float* g, int64_t n, uint64_t key, float p, float* dx, cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  DropoutKernel<true><<<Blocks(n), kThreads, 0, stream>>>(g, n, key, p, dx);
  return CheckLaunch("DropoutKernel");
}

Status AddSumOfSquares(const float* g, int64_t n, double* sum_sq, cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  SumOfSquaresKernel<<<Blocks(n), kThreads, 0, stream>>>(g, n, sum_sq);
  return CheckLaunch("SumOfSquaresKernel");
}

Status ScaleInPlace(float* g, int64_t n, float s, cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  ScaleKernel<<<Blocks(n), kThreads, 0, stream>>>(g, n, s);
  return CheckLaunch("ScaleKernel");
}

Status AdamWStep(float* param, const float* grad, float* m, float* v, int64_t n, const AdamWUpdate& u,
                 cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  AdamWKernel<<<Blocks(n), kThreads, 0, stream>>>(param, grad, m, v, n, u);
  return CheckLaunch("AdamWKernel");
}

}  // namespace gk::cuda
