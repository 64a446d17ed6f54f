// Seeded random values written on the GPU (bench --preset: a 31B-shaped model without a
// checkpoint, as the GPU machine's 64 GB disk cannot hold the 62 GB one and the host would take
// minutes to make and copy it). Values are uniform in [-scale, scale), from a hash of (seed,
// index): the same seed gives the same bytes.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "tensor/dtype.h"
#include "util/result.h"

namespace gk::cuda {

// n elements of dtype (kBF16 or kF32) at data.
Status FillRandom(void* data, DType dtype, int64_t n, float scale, uint64_t seed, cudaStream_t stream);

}  // namespace gk::cuda
