#include "kernels/cuda/fill_random.h"

#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/cuda/cuda_memory.h"

namespace gk::cuda {
namespace {

__device__ uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

template <bool kBf16>
__global__ void FillKernel(void* data, int64_t n, float scale, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t h = SplitMix(seed ^ SplitMix(uint64_t(i)));
    const float u = float(h >> 40) * (1.f / float(1 << 24));  // [0, 1)
    const float v = (2.f * u - 1.f) * scale;
    if (kBf16) static_cast<__nv_bfloat16*>(data)[i] = __float2bfloat16_rn(v);
    else static_cast<float*>(data)[i] = v;
  }
}

}  // namespace

Status FillRandom(void* data, DType dtype, int64_t n, float scale, uint64_t seed, cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  const int blocks = int(std::min<int64_t>((n + 255) / 256, 65535));
  if (dtype == DType::kBF16) FillKernel<true><<<blocks, 256, 0, stream>>>(data, n, scale, seed);
  else if (dtype == DType::kF32) FillKernel<false><<<blocks, 256, 0, stream>>>(data, n, scale, seed);
  else return Status::Error(StrCat("random GPU weights are bf16 or f32, not ", DTypeName(dtype)));
  return CheckLaunch("FillKernel");
}

}  // namespace gk::cuda
