// GK_HOST_DEVICE marks the small inline functions that the CPU kernels and the CUDA kernels
// (kernels/cuda/) share, so that both compute the same bits from one definition.
#pragma once

#if defined(__CUDACC__)
#define GK_HOST_DEVICE __host__ __device__
#else
#define GK_HOST_DEVICE
#endif
