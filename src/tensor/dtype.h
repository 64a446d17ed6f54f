// Element types found in checkpoints and their conversions to float32.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace gk {

// kQ8_0 is the engine's block-quantized matrix format (see MatrixView), not a safetensors dtype:
// DTypeFromName never returns it.
enum class DType : uint8_t { kF32, kBF16, kF16, kF64, kI64, kI32, kI16, kI8, kU8, kBool, kQ8_0, kUnknown };

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

}  // namespace gk
