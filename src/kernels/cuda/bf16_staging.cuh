// Writing one value into a Bf16Staging, on the device: the terms SplitToBf16 makes.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/bf16_staging.h"

namespace gk::cuda {

// Each remainder is exact in f32; with lo2, hi + lo + lo2 == x exactly (each term takes at
// least 8 of the 24 significant bits).
__device__ inline void StageBf16(const Bf16Staging& s, int64_t i, float x) {
  const __nv_bfloat16 h = __float2bfloat16_rn(x);
  s.hi[i] = __bfloat16_as_ushort(h);
  if (s.lo == nullptr) return;
  const float r = x - __bfloat162float(h);
  const __nv_bfloat16 l = __float2bfloat16_rn(r);
  s.lo[i] = __bfloat16_as_ushort(l);
  if (s.lo2 != nullptr) s.lo2[i] = __bfloat16_as_ushort(__float2bfloat16_rn(r - __bfloat162float(l)));
}

}  // namespace gk::cuda
