#include "kernels/cuda/gemv.h"

#include <cuda_bf16.h>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_memory.h"

namespace gk::cuda {
namespace {

constexpr int kWarps = 4;  // per block
// Weight rows per warp: each element of x read from the cache serves this many rows. With one
// row per warp, x's reads at 8 tokens would be 16 times the weights' bytes, more than the L1
// delivers; with four, 4 times.
constexpr int kRows = 4;

__device__ inline float Bf16Low(uint32_t v) { return __uint_as_float(v << 16); }  // the first of the pair
__device__ inline float Bf16High(uint32_t v) { return __uint_as_float(v & 0xffff0000u); }
__device__ inline float RoundToBf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// Warp w of block b: rows (b·kWarps + w)·kRows ... + kRows - 1 of W. Lane l reads 8 weights of
// each row at a time (16 bytes), chunks l, l + 32, ...: a warp's load is 512 contiguous bytes
// of a row.
template <int kT, bool kRound>
__global__ void __launch_bounds__(kWarps * 32)
    GemvBf16Kernel(const uint16_t* __restrict__ w, int64_t rows, int64_t cols, const float* __restrict__ x, float* y,
                   bool accumulate) {
  const int lane = threadIdx.x % 32;
  const int64_t row0 = (int64_t(blockIdx.x) * kWarps + threadIdx.x / 32) * kRows;
  if (row0 >= rows) return;  // (the whole warp: WarpSum below has every lane)
  const int n_rows = int(rows - row0 < kRows ? rows - row0 : kRows);
  const int64_t chunks = cols / 8;
  float acc[kRows][kT];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int t = 0; t < kT; ++t) acc[r][t] = 0.f;
  }
#pragma unroll 2
  for (int64_t c = lane; c < chunks; c += 32) {
    float wv[kRows][8];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const uint4 p = r < n_rows ? reinterpret_cast<const uint4*>(w + (row0 + r) * cols)[c] : uint4{0, 0, 0, 0};
      wv[r][0] = Bf16Low(p.x), wv[r][1] = Bf16High(p.x), wv[r][2] = Bf16Low(p.y), wv[r][3] = Bf16High(p.y);
      wv[r][4] = Bf16Low(p.z), wv[r][5] = Bf16High(p.z), wv[r][6] = Bf16Low(p.w), wv[r][7] = Bf16High(p.w);
    }
#pragma unroll
    for (int t = 0; t < kT; ++t) {
      const float4* xr = reinterpret_cast<const float4*>(x + t * cols) + 2 * c;
      const float4 a = xr[0], b = xr[1];
      float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
      if (kRound) {
#pragma unroll
        for (int i = 0; i < 8; ++i) xv[i] = RoundToBf16(xv[i]);
      }
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[r][t] += wv[r][i] * xv[i];
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if (r >= n_rows) break;  // (uniform across the warp)
#pragma unroll
    for (int t = 0; t < kT; ++t) {
      const float s = WarpSum(acc[r][t]);
      float* out = y + t * rows + row0 + r;
      if (lane == 0) *out = accumulate ? *out + s : s;
    }
  }
}

template <int kT>
void Launch(const uint16_t* w, int64_t rows, int64_t cols, const float* x, float* y, bool round_x, bool accumulate,
            cudaStream_t stream) {
  const unsigned blocks = unsigned((rows + kWarps * kRows - 1) / (kWarps * kRows));
  if (round_x) GemvBf16Kernel<kT, true><<<blocks, kWarps * 32, 0, stream>>>(w, rows, cols, x, y, accumulate);
  else GemvBf16Kernel<kT, false><<<blocks, kWarps * 32, 0, stream>>>(w, rows, cols, x, y, accumulate);
}

}  // namespace

bool GemvSupports(const void* w, const float* x, int64_t cols, int64_t T) {
  return T >= 1 && T <= kGemvMaxTokens && cols % 8 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(x) % 16 == 0;
}

Status GemvBf16(const uint16_t* w, int64_t rows, int64_t cols, const float* x, int64_t T, float* y, bool round_x,
                bool accumulate, cudaStream_t stream) {
  if (rows == 0 || T == 0) return Status::Ok();
  if (!GemvSupports(w, x, cols, T)) {
    return Status::Error(StrCat("the GEMV kernel takes 1 to ", kGemvMaxTokens, " rows of 16-byte aligned activations ",
                                "and weight rows of a multiple of 8 columns; got ", T, " rows of ", cols));
  }
  switch (T) {
    case 1: Launch<1>(w, rows, cols, x, y, round_x, accumulate, stream); break;
    case 2: Launch<2>(w, rows, cols, x, y, round_x, accumulate, stream); break;
    case 3: Launch<3>(w, rows, cols, x, y, round_x, accumulate, stream); break;
    case 4: Launch<4>(w, rows, cols, x, y, round_x, accumulate, stream); break;
    case 5: Launch<5>(w, rows, cols, x, y, round_x, accumulate, stream); break;
    case 6: Launch<6>(w, rows, cols, x, y, round_x, accumulate, stream); break;
    case 7: Launch<7>(w, rows, cols, x, y, round_x, accumulate, stream); break;
    default: Launch<8>(w, rows, cols, x, y, round_x, accumulate, stream); break;
  }
  return CheckLaunch("GemvBf16Kernel");
}

}  // namespace gk::cuda
