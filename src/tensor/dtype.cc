#include "tensor/dtype.h"

#include <cpuid.h>
#include <immintrin.h>

#include <cstring>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace gk {

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF64: case DType::kI64: return 8;
    case DType::kF32: case DType::kI32: return 4;
    case DType::kBF16: case DType::kF16: case DType::kI16: return 2;
    case DType::kI8: case DType::kU8: case DType::kBool: case DType::kQ8_0: return 1;
    case DType::kFp8E4m3: case DType::kFp8E5m2: return 1;
    case DType::kUnknown: return 0;
  }
  return 0;
}

std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kF64: return "F64";
    case DType::kI64: return "I64";
    case DType::kI32: return "I32";
    case DType::kI16: return "I16";
    case DType::kI8: return "I8";
    case DType::kU8: return "U8";
    case DType::kBool: return "BOOL";
    case DType::kQ8_0: return "Q8_0";
    case DType::kFp8E4m3: return "F8_E4M3";
    case DType::kFp8E5m2: return "F8_E5M2";
    case DType::kUnknown: return "UNKNOWN";
  }
  return "UNKNOWN";
}

DType DTypeFromName(std::string_view n) {
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16, DType::kF64, DType::kI64, DType::kI32,
                  DType::kI16, DType::kI8, DType::kU8, DType::kBool, DType::kFp8E4m3, DType::kFp8E5m2}) {
    if (DTypeName(t) == n) return t;
  }
  return DType::kUnknown;
}

float F16ToF32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t man = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: value = man * 2^-24
      float f = std::ldexp(float(man), -24);
      std::memcpy(&bits, &f, 4);
      bits |= sign;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t F32ToF16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return sign | 0x7e00;        // NaN
  if (ax >= 0x477ff000u) return sign | 0x7c00;       // overflow -> inf (round-to-nearest)
  if (ax < 0x38800000u) {                            // subnormal or zero in f16
    float a;
    std::memcpy(&a, &ax, 4);
    return sign | uint16_t(std::nearbyint(a * 16777216.0f));  // a / 2^-24
  }
  uint32_t r = ax + 0xfffu + ((ax >> 13) & 1u);      // round to nearest even on 13 dropped bits
  return sign | uint16_t((r - 0x38000000u) >> 13);
}

namespace {

// Shared FP8 encoder: `man` mantissa bits, exponent bias `bias`, `max_code` the largest finite
// code without sign (inputs of at least its value saturate to it).
template <int man, int bias, uint32_t max_code>
inline uint8_t F32ToFp8(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint8_t sign = uint8_t((x >> 24) & 0x80);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return sign | 0x7f;  // NaN
  constexpr uint32_t kMaxBits = ((max_code + uint32_t((127 - bias) << man)) << (23 - man));
  if (ax >= kMaxBits) return uint8_t(sign | max_code);
  constexpr uint32_t kMinNormalBits = uint32_t(127 - bias + 1) << 23;
  if (ax < kMinNormalBits) {  // subnormal or zero: the code is round(|f| / 2^(1 - bias - man))
    float a;
    std::memcpy(&a, &ax, 4);
    // Exact scaling by a power of two, then nearbyint rounds half to even (the default mode).
    // The result is at most 2^man, the smallest normal's code.
    return uint8_t(sign | uint32_t(std::nearbyint(std::ldexp(a, bias - 1 + man))));
  }
  constexpr int drop = 23 - man;  // mantissa bits dropped, rounded to nearest even
  const uint32_t r = ax + ((1u << (drop - 1)) - 1u) + ((ax >> drop) & 1u);
  return uint8_t(sign | ((r >> drop) - uint32_t((127 - bias) << man)));
}

}  // namespace

uint8_t F32ToFp8E4m3(float f) {
  if (std::isinf(f)) return std::signbit(f) ? 0xfe : 0x7e;  // no infinity in E4M3FN
  return F32ToFp8<3, 7, 0x7e>(f);
}

uint8_t F32ToFp8E5m2(float f) {
  if (std::isinf(f)) return std::signbit(f) ? 0xfc : 0x7c;
  return F32ToFp8<2, 15, 0x7b>(f);
}

namespace {

constexpr float kF16Max = 65504.f;  // largest finite f16

inline uint16_t F32ToF16Saturated(float f) { return F32ToF16(std::clamp(f, -kF16Max, kF16Max)); }

// f32 -> f16 saturated, 8 at a time with F16C (round to nearest even, subnormals kept, the
// same bits as F32ToF16 of the clamped value): every K and V row the KV cache stores comes
// through here, and the scalar loop was ~4 % of a 270M prefill (docs/PERF.md). A vector with a
// NaN takes the scalar loop, which writes F32ToF16's NaN code. Returns the elements done.
__attribute__((target("avx2,f16c"))) int64_t ToF16SaturatedF16c(const float* src, int64_t n, uint16_t* d) {
  const __m256 lo = _mm256_set1_ps(-kF16Max), hi = _mm256_set1_ps(kF16Max);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(src + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0) {
      for (int64_t k = i; k < i + 8; ++k) d[k] = F32ToF16Saturated(src[k]);
      continue;
    }
    const __m256 c = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
    const __m128i h = _mm256_cvtps_ph(c, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), h);
  }
  return i;
}

// F16C and AVX2 (with the OS saving AVX state). F16C is read from CPUID leaf 1 directly:
// clang 14's __builtin_cpu_supports does not know the "f16c" feature string.
bool HasF16cAvx2() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __builtin_cpu_supports("avx2") && __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
}

}  // namespace

void ConvertFromF32(DType dst, const float* src, int64_t n, void* dst_ptr) {
  switch (dst) {
    case DType::kF32:
      if (n > 0) std::memcpy(dst_ptr, src, size_t(n) * 4);
      return;
    case DType::kBF16: {
      auto* d = static_cast<uint16_t*>(dst_ptr);
      for (int64_t i = 0; i < n; ++i) d[i] = F32ToBf16(src[i]);
      return;
    }
    case DType::kF16: {
      auto* d = static_cast<uint16_t*>(dst_ptr);
      static const bool f16c = HasF16cAvx2();
      int64_t i = f16c ? ToF16SaturatedF16c(src, n, d) : 0;
      for (; i < n; ++i) d[i] = F32ToF16Saturated(src[i]);
      return;
    }
    case DType::kFp8E4m3: {
      auto* d = static_cast<uint8_t*>(dst_ptr);
      for (int64_t i = 0; i < n; ++i) d[i] = F32ToFp8E4m3(src[i]);  // saturates infinities too
      return;
    }
    case DType::kFp8E5m2: {
      auto* d = static_cast<uint8_t*>(dst_ptr);
      constexpr float kMax = 57344.f;  // largest finite E5M2
      for (int64_t i = 0; i < n; ++i) d[i] = F32ToFp8E5m2(std::clamp(src[i], -kMax, kMax));
      return;
    }
    default:
      break;
  }
  std::fprintf(stderr, "ConvertFromF32: unsupported destination dtype %s\n", std::string(DTypeName(dst)).c_str());
  std::abort();
}

void WidenToF32(DType dt, const uint8_t* src, int64_t n, float* dst) {
  if (dt == DType::kF32) {
    std::memcpy(dst, src, size_t(n) * 4);
    return;
  }
  // One loop per dtype: the bf16 one is a shift the compiler vectorizes.
  if (dt == DType::kBF16) {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      dst[i] = Bf16ToF32(h);
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    dst[i] = F16ToF32(h);
  }
}

void NarrowFromF32(DType dt, const float* src, int64_t n, uint8_t* dst) {
  if (dt == DType::kF32) {
    std::memcpy(dst, src, size_t(n) * 4);
    return;
  }
  if (dt == DType::kBF16) {
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t h = F32ToBf16(src[i]);
      std::memcpy(dst + 2 * i, &h, 2);
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = F32ToF16(src[i]);
    std::memcpy(dst + 2 * i, &h, 2);
  }
}

}  // namespace gk
