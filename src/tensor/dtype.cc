#include "tensor/dtype.h"

#include <cmath>

namespace gk {

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF64: case DType::kI64: return 8;
    case DType::kF32: case DType::kI32: return 4;
    case DType::kBF16: case DType::kF16: case DType::kI16: return 2;
    case DType::kI8: case DType::kU8: case DType::kBool: case DType::kQ8_0: return 1;
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
    case DType::kUnknown: return "UNKNOWN";
  }
  return "UNKNOWN";
}

DType DTypeFromName(std::string_view n) {
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16, DType::kF64, DType::kI64, DType::kI32,
                  DType::kI16, DType::kI8, DType::kU8, DType::kBool}) {
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

}  // namespace gk
