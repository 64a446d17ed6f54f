// Conversions between f32 and the KV cache's element types on the device, matching
// tensor/dtype.h's ConvertFromF32 / ToF32: round to nearest even; f16 and fp8 saturate at their
// largest finite value (E5M2's clamp first, as the CPU does). And f32 into the attention
// products' operand types (ToOperand).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace gk::cuda {

enum class KvType : int { kF32, kF16, kBF16, kE4M3, kE5M2 };

template <KvType T>
struct KvElem;
template <>
struct KvElem<KvType::kF32> {
  using Storage = float;
  __device__ static float Load(Storage s) { return s; }
  __device__ static Storage Store(float x) { return x; }
};
template <>
struct KvElem<KvType::kF16> {
  using Storage = uint16_t;
  __device__ static float Load(Storage s) { return __half2float(__ushort_as_half(s)); }
  __device__ static Storage Store(float x) {
    // Saturating as the CPU's std::clamp, which passes NaN through (fmaxf would turn it into -max).
    return __half_as_ushort(__float2half_rn(isnan(x) ? x : fminf(fmaxf(x, -65504.f), 65504.f)));
  }
};
template <>
struct KvElem<KvType::kBF16> {
  using Storage = uint16_t;
  __device__ static float Load(Storage s) { return __uint_as_float(uint32_t(s) << 16); }
  __device__ static Storage Store(float x) { return __bfloat16_as_ushort(__float2bfloat16_rn(x)); }
};
template <>
struct KvElem<KvType::kE4M3> {
  using Storage = uint8_t;
  __device__ static float Load(Storage s) {
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(s), __NV_E4M3)));
  }
  __device__ static Storage Store(float x) { return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3); }
};
template <>
struct KvElem<KvType::kE5M2> {
  using Storage = uint8_t;
  __device__ static float Load(Storage s) {
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(s), __NV_E5M2)));
  }
  __device__ static Storage Store(float x) {
    return __nv_cvt_float_to_fp8(isnan(x) ? x : fminf(fmaxf(x, -57344.f), 57344.f), __NV_SATFINITE, __NV_E5M2);
  }
};

// f32 to a tensor-core operand type (the products' inputs): f32 as is, f16 and bf16 rounded to
// nearest even.
template <class Op>
__device__ Op ToOperand(float x);
template <>
__device__ inline float ToOperand<float>(float x) { return x; }
template <>
__device__ inline __half ToOperand<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ inline __nv_bfloat16 ToOperand<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

}  // namespace gk::cuda
