// Element types found in checkpoints and their conversions to float32.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace gk {

// kQ8_0 is the engine's block-quantized matrix format (see MatrixView), not a safetensors dtype:
// DTypeFromName never returns it. kFp8E4m3 / kFp8E5m2 are OCP FP8 (torch.float8_e4m3fn /
// torch.float8_e5m2, safetensors "F8_E4M3" / "F8_E5M2"), used as KV-cache element types.
enum class DType : uint8_t {
  kF32, kBF16, kF16, kF64, kI64, kI32, kI16, kI8, kU8, kBool, kQ8_0, kFp8E4m3, kFp8E5m2, kUnknown
};

// Bytes per element (0 for kUnknown; 1 for kQ8_0, whose block scales come on top).
size_t DTypeSize(DType t);
// Safetensors spelling: "F32", "BF16", ...
std::string_view DTypeName(DType t);
DType DTypeFromName(std::string_view name);  // kUnknown when not recognised

inline float Bf16ToF32(uint16_t v) {
  uint32_t bits = uint32_t(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even, as torch and JAX do; NaN stays NaN.
inline uint16_t F32ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

inline float RoundToBf16(float f) { return Bf16ToF32(F32ToBf16(f)); }

float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);

// n elements of a float dtype (kF32, kBF16 or kF16; unaligned bytes) widened to f32.
void WidenToF32(DType dt, const uint8_t* src, int64_t n, float* dst);
// The reverse, rounding to nearest even (kF32, kBF16 or kF16).
void NarrowFromF32(DType dt, const float* src, int64_t n, uint8_t* dst);

// OCP FP8 (as torch.float8_e4m3fn and torch.float8_e5m2).
//   E4M3FN: 1 sign, 4 exponent (bias 7), 3 mantissa bits; no infinities; S.1111.111 is NaN;
//           largest finite ±448 (0x7e), smallest subnormal 2^-9.
//   E5M2:   1 sign, 5 exponent (bias 15), 2 mantissa bits; IEEE-like (the high byte of an
//           f16): ±inf 0x7c/0xfc, NaN 0x7d..0x7f; largest finite ±57344 (0x7b), smallest
//           subnormal 2^-16.
// Decoding is exact.
inline float Fp8E4m3ToF32(uint8_t v) {
  const uint32_t sign = uint32_t(v & 0x80) << 24;
  const uint32_t em = v & 0x7fu;  // exponent and mantissa
  float f;
  if (em == 0x7f) {
    f = __builtin_nanf("");
  } else if (em < 0x08) {  // zero or subnormal: m · 2^-9
    f = float(em) * 0.001953125f;
  } else {
    const uint32_t bits = (em + (120u << 3)) << 20;  // exponent rebiased 7 -> 127
    std::memcpy(&f, &bits, 4);
  }
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits |= sign;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline float Fp8E5m2ToF32(uint8_t v) {
  const uint32_t sign = uint32_t(v & 0x80) << 24;
  const uint32_t em = v & 0x7fu;
  uint32_t bits;
  if (em == 0x7c) {
    bits = 0x7f800000u;  // inf
  } else if (em > 0x7c) {
    bits = 0x7fc00000u | ((em & 3u) << 21);  // quiet NaN
  } else if (em < 0x04) {  // zero or subnormal: m · 2^-16
    const float f = float(em) * 1.52587890625e-05f;
    std::memcpy(&bits, &f, 4);
  } else {
    bits = (em + (112u << 2)) << 21;  // exponent rebiased 15 -> 127
  }
  bits |= sign;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round to nearest even. Finite values beyond the largest finite value saturate to ±max
// (vLLM's KV-cache quantization clamps before the cast; torch.to(float8_e4m3fn) would give
// NaN from 464 on, .to(float8_e5m2) inf from 61440 on). NaN stays NaN (0x7f with the sign).
// Infinity: E4M3FN has none and gives ±448; E5M2 keeps ±inf (ConvertFromF32 saturates it).
uint8_t F32ToFp8E4m3(float f);
uint8_t F32ToFp8E5m2(float f);

// Writes n floats as `dst` elements (kF32, kF16, kBF16, kFp8E4m3 or kFp8E5m2) at dst_ptr,
// as a KV cache stores them: round to nearest even; f16, E4M3 and E5M2 saturate every
// out-of-range value, infinities included, to ±max (as std::clamp to the finite range, so
// f16 matches KvLayer::Write); bf16 keeps infinities; NaN stays NaN. Other dtypes abort.
void ConvertFromF32(DType dst, const float* src, int64_t n, void* dst_ptr);

}  // namespace gk
