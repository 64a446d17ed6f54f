#include "tensor/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace gk {
namespace {

float FromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

bool IsE4m3Nan(int c) { return (c & 0x7f) == 0x7f; }
bool IsE5m2Nan(int c) { return (c & 0x7f) > 0x7c; }

TEST(DType, SizesAndNames) {
  EXPECT_EQ(DTypeSize(DType::kFp8E4m3), 1u);
  EXPECT_EQ(DTypeSize(DType::kFp8E5m2), 1u);
  EXPECT_EQ(DTypeName(DType::kFp8E4m3), "F8_E4M3");
  EXPECT_EQ(DTypeName(DType::kFp8E5m2), "F8_E5M2");
  EXPECT_EQ(DTypeFromName("F8_E4M3"), DType::kFp8E4m3);
  EXPECT_EQ(DTypeFromName("F8_E5M2"), DType::kFp8E5m2);
  EXPECT_EQ(DTypeFromName("F8_E4M3FNUZ"), DType::kUnknown);
  EXPECT_EQ(DTypeFromName("Q8_0"), DType::kUnknown);
  // Every named dtype round-trips through its name.
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16, DType::kF64, DType::kI64, DType::kI32, DType::kI16,
                  DType::kI8, DType::kU8, DType::kBool, DType::kFp8E4m3, DType::kFp8E5m2}) {
    EXPECT_EQ(DTypeFromName(DTypeName(t)), t) << DTypeName(t);
  }
}

// Decoding from the spec's formula: (-1)^s · 2^(e - bias) · (1 + m / 2^M), or for e = 0
// (-1)^s · 2^(1 - bias) · m / 2^M.
double SpecValue(int code, int man_bits, int bias) {
  const int s = code >> 7, e = (code & 0x7f) >> man_bits, m = code & ((1 << man_bits) - 1);
  const double mag = e == 0 ? std::ldexp(double(m), 1 - bias - man_bits)
                            : std::ldexp(1.0 + double(m) / double(1 << man_bits), e - bias);
  return s ? -mag : mag;
}

TEST(Fp8, E4m3DecodeAllCodes) {
  for (int c = 0; c < 256; ++c) {
    const float f = Fp8E4m3ToF32(uint8_t(c));
    if (IsE4m3Nan(c)) {
      EXPECT_TRUE(std::isnan(f)) << c;
      continue;
    }
    EXPECT_EQ(double(f), SpecValue(c, 3, 7)) << c;
    EXPECT_EQ(std::signbit(f), c >= 0x80) << c;
    // The kernels' widening: bits 0..6 at f16 bits 7..13, the sign at bit 15, times 256.
    const uint16_t h = uint16_t(((c & 0x7f) << 7) | ((c & 0x80) << 8));
    EXPECT_EQ(F16ToF32(h) * 256.f, f) << c;
  }
  EXPECT_EQ(Fp8E4m3ToF32(0x7e), 448.f);
  EXPECT_EQ(Fp8E4m3ToF32(0xfe), -448.f);
  EXPECT_EQ(Fp8E4m3ToF32(0x01), std::ldexp(1.f, -9));
  EXPECT_EQ(Fp8E4m3ToF32(0x08), std::ldexp(1.f, -6));
}

TEST(Fp8, E5m2DecodeAllCodes) {
  for (int c = 0; c < 256; ++c) {
    const float f = Fp8E5m2ToF32(uint8_t(c));
    // E5M2 is the high byte of an f16 (the kernels widen it that way).
    const float h = F16ToF32(uint16_t(c << 8));
    if (IsE5m2Nan(c)) {
      EXPECT_TRUE(std::isnan(f)) << c;
      EXPECT_TRUE(std::isnan(h)) << c;
      continue;
    }
    EXPECT_EQ(f, h) << c;
    EXPECT_EQ(std::signbit(f), c >= 0x80) << c;
    if ((c & 0x7f) == 0x7c) {
      EXPECT_TRUE(std::isinf(f)) << c;
    } else {
      EXPECT_EQ(double(f), SpecValue(c, 2, 15)) << c;
    }
  }
  EXPECT_EQ(Fp8E5m2ToF32(0x7b), 57344.f);
  EXPECT_EQ(Fp8E5m2ToF32(0x01), std::ldexp(1.f, -16));
  EXPECT_EQ(Fp8E5m2ToF32(0x04), std::ldexp(1.f, -14));
}

// decode → encode gives back every code but the NaNs (E5M2's infinities included).
TEST(Fp8, ExhaustiveRoundTrip) {
  for (int c = 0; c < 256; ++c) {
    if (!IsE4m3Nan(c)) {
      EXPECT_EQ(F32ToFp8E4m3(Fp8E4m3ToF32(uint8_t(c))), c) << "e4m3 " << c;
    }
    if (!IsE5m2Nan(c)) {
      EXPECT_EQ(F32ToFp8E5m2(Fp8E5m2ToF32(uint8_t(c))), c) << "e5m2 " << c;
    }
  }
}

TEST(Fp8, NanStaysNan) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(Fp8E4m3ToF32(F32ToFp8E4m3(nan))));
  EXPECT_TRUE(std::isnan(Fp8E5m2ToF32(F32ToFp8E5m2(nan))));
  EXPECT_TRUE(std::isnan(Fp8E4m3ToF32(F32ToFp8E4m3(-nan))));
  EXPECT_TRUE(std::isnan(Fp8E5m2ToF32(F32ToFp8E5m2(-nan))));
  EXPECT_EQ(F32ToFp8E4m3(nan) & 0x7f, 0x7f);
  EXPECT_EQ(F32ToFp8E5m2(nan) & 0x7f, 0x7f);
}

// Expected codes written by hand from the OCP FP8 spec (v1.0), not computed by this code base:
// Debian 12's python3-torch 1.13 has no float8 dtypes to ask.
struct HandCase {
  float x;
  uint8_t e4m3, e5m2;
};

TEST(Fp8, HandWrittenSpecValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const HandCase cases[] = {
      {0.f, 0x00, 0x00},
      {-0.f, 0x80, 0x80},
      {1.f, 0x38, 0x3c},
      {-1.f, 0xb8, 0xbc},
      {2.f, 0x40, 0x40},
      {-2.f, 0xc0, 0xc0},
      {0.5f, 0x30, 0x38},
      {1.125f, 0x39, 0x3c},      // E5M2: tie between 1.0 (m=0) and 1.25 (m=1) → even
      {1.0625f, 0x38, 0x3c},     // E4M3: tie between 1.0 (m=0) and 1.125 (m=1) → even
      {1.1875f, 0x3a, 0x3d},     // E4M3: tie between 1.125 (m=1) and 1.25 (m=2) → even
      {1.25f, 0x3a, 0x3d},
      {1.375f, 0x3b, 0x3e},      // E5M2: tie between 1.25 (m=1) and 1.5 (m=2) → even
      {0.1f, 0x1d, 0x2e},        // 0.1015625 and 0.09375
      {-3.3f, 0xc5, 0xc3},       // -3.25 and -3.5
      {240.f, 0x77, 0x5c},       // 1.875·2^7; E5M2: tie 1.75·2^7 (0x5b) / 2^8 (0x5c) → 256
      {256.f, 0x78, 0x5c},
      {416.f, 0x7d, 0x5e},       // 1.625·2^8; E5M2 1.5·2^8 = 384 (1.625 is a tie → even m=2)
      {432.f, 0x7e, 0x5f},       // E4M3: tie 416 (m=5) / 448 (m=6) → 448
      {448.f, 0x7e, 0x5f},
      {-448.f, 0xfe, 0xdf},
      {449.f, 0x7e, 0x5f},       // E4M3: beyond max → saturates
      {464.f, 0x7e, 0x5f},       // (torch's cast would give NaN from here on)
      {1000.f, 0x7e, 0x64},      // E5M2: 1024
      {-1e10f, 0xfe, 0xfb},
      {inf, 0x7e, 0x7c},         // E4M3 has no infinity; E5M2 keeps it
      {-inf, 0xfe, 0xfc},
      {49152.f, 0x7e, 0x7a},     // 1.5·2^15
      {57344.f, 0x7e, 0x7b},     // E5M2 max
      {61439.f, 0x7e, 0x7b},
      {61440.f, 0x7e, 0x7b},     // E5M2 midpoint max / 2^16: saturates (torch: inf)
      {65504.f, 0x7e, 0x7b},
      {0.015625f, 0x08, 0x24},   // 2^-6: E4M3's smallest normal
      {0.013671875f, 0x07, 0x23},  // 7·2^-9: E4M3's largest subnormal; 1.75·2^-7 in E5M2
      {0.001953125f, 0x01, 0x18},  // 2^-9: E4M3's smallest subnormal
      {0.0009765625f, 0x00, 0x14},  // 2^-10: E4M3 tie 0 / 2^-9 → 0
      {0.00097662f, 0x01, 0x14},   // just above 2^-10
      {0.0029296875f, 0x02, 0x1a},  // 3·2^-10: E4M3 tie 2^-9 / 2·2^-9 → 2
      {0.0146484375f, 0x08, 0x24},  // 15·2^-10: tie 0x07 / 0x08 → 0x08
      {6.103515625e-05f, 0x00, 0x04},  // 2^-14: E5M2's smallest normal
      {4.57763671875e-05f, 0x00, 0x03},  // 3·2^-16: E5M2's largest subnormal
      {1.52587890625e-05f, 0x00, 0x01},  // 2^-16: E5M2's smallest subnormal
      {7.62939453125e-06f, 0x00, 0x00},  // 2^-17: tie → 0
      {2.288818359375e-05f, 0x00, 0x02},  // 3·2^-17: tie 1 / 2 → 2
      {5.340576171875e-05f, 0x00, 0x04},  // 7·2^-17: tie 3 / 4 → 4
      {-5.340576171875e-05f, 0x80, 0x84},
  };
  for (const HandCase& c : cases) {
    EXPECT_EQ(int(F32ToFp8E4m3(c.x)), int(c.e4m3)) << "e4m3 of " << c.x;
    EXPECT_EQ(int(F32ToFp8E5m2(c.x)), int(c.e5m2)) << "e5m2 of " << c.x;
  }
}

// Rows generated by dtype_test_fp8_table.py: an exact-fraction nearest-value search over each
// format's value set, written from the OCP spec (see there).
struct TableRow {
  uint32_t bits;
  uint8_t e4m3, e5m2;
};
constexpr TableRow kTable[] = {
#include "tensor/dtype_test_fp8_table.inc"
};

TEST(Fp8, MatchesGeneratedSpecTable) {
  static_assert(sizeof(kTable) / sizeof(kTable[0]) > 1000);
  int bad = 0;
  for (const TableRow& r : kTable) {
    const float x = FromBits(r.bits);
    if (F32ToFp8E4m3(x) != r.e4m3 || F32ToFp8E5m2(x) != r.e5m2) {
      ADD_FAILURE() << std::hexfloat << x << " (0x" << std::hex << r.bits << "): e4m3 0x"
                    << int(F32ToFp8E4m3(x)) << " want 0x" << int(r.e4m3) << ", e5m2 0x" << int(F32ToFp8E5m2(x))
                    << " want 0x" << int(r.e5m2);
      if (++bad > 20) return;
    }
  }
}

// Brute force over the decoded value sets: nearest, ties to the even code, saturating.
uint8_t NearestCode(float x, float (*decode)(uint8_t), bool (*is_special)(int)) {
  double best = INFINITY;
  int best_code = -1;
  for (int c = 0; c < 0x80; ++c) {
    if (is_special(c)) continue;
    const double d = std::fabs(std::fabs(double(x)) - double(decode(uint8_t(c))));
    if (d < best || (d == best && c % 2 == 0)) {
      best = d;
      best_code = c;
    }
  }
  return uint8_t(best_code | (std::signbit(x) ? 0x80 : 0));
}

TEST(Fp8, RandomFloatsMatchBruteForce) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> exp(127 - 26, 127 + 18);
  std::uniform_int_distribution<uint32_t> man(0, (1u << 23) - 1);
  auto e4_special = [](int c) { return c == 0x7f; };
  auto e5_special = [](int c) { return c >= 0x7c; };
  for (int i = 0; i < 20000; ++i) {
    const float x = FromBits((uint32_t(exp(rng)) << 23) | man(rng) | (i % 2 ? 0x80000000u : 0u));
    ASSERT_EQ(int(F32ToFp8E4m3(x)), int(NearestCode(x, Fp8E4m3ToF32, e4_special))) << x;
    ASSERT_EQ(int(F32ToFp8E5m2(x)), int(NearestCode(x, Fp8E5m2ToF32, e5_special))) << x;
  }
}

// F32 subnormals and tiny values go to (signed) zero or the smallest subnormals correctly.
TEST(Fp8, TinyInputs) {
  EXPECT_EQ(F32ToFp8E4m3(FromBits(1)), 0x00);
  EXPECT_EQ(F32ToFp8E4m3(FromBits(0x80000001u)), 0x80);
  EXPECT_EQ(F32ToFp8E5m2(FromBits(0x807fffffu)), 0x80);
  EXPECT_EQ(F32ToFp8E4m3(std::ldexp(1.f, -10) * 1.0000001f), 0x01);
  EXPECT_EQ(F32ToFp8E5m2(std::ldexp(1.f, -17) * 1.0000001f), 0x01);
  EXPECT_EQ(F32ToFp8E4m3(std::nextafter(std::ldexp(1.f, -10), 0.f)), 0x00);
  EXPECT_EQ(F32ToFp8E5m2(std::nextafter(std::ldexp(1.f, -17), 0.f)), 0x00);
}

TEST(ConvertFromF32, EveryKvDtype) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> src = {0.f, -0.f, 1.f, -2.5f, 0.1f, 3.3e-6f, 300.f, 500.f, 60000.f, 70000.f, 1e30f,
                            -1e30f, inf, -inf, nan};
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 4.f);
  for (int i = 0; i < 200; ++i) src.push_back(nd(rng));
  // f16 rounding cases: ties to even among normals (1 + 2^-11, 1 + 3·2^-11) and subnormals
  // (2^-25, 3·2^-25), the smallest subnormal and below it, the normal/subnormal border, the
  // largest finite f16 and the first value that rounds past it.
  for (float x : {1.f + std::ldexp(1.f, -11), 1.f + 3 * std::ldexp(1.f, -11), std::ldexp(1.f, -25),
                  3 * std::ldexp(1.f, -25), std::ldexp(1.f, -24), std::ldexp(1.f, -26),
                  std::nextafter(std::ldexp(1.f, -14), 0.f), std::ldexp(1.f, -14), 65504.f, 65520.f}) {
    src.push_back(x);
    src.push_back(-x);
  }
  for (int i = 0; i < 37; ++i) src.push_back(nd(rng) * 1e-6f);  // f16 subnormals; an odd tail
  const int64_t n = int64_t(src.size());

  std::vector<float> f32(src.size());
  ConvertFromF32(DType::kF32, src.data(), n, f32.data());
  for (size_t i = 0; i < src.size(); ++i) EXPECT_EQ(Bits(f32[i]), Bits(src[i]));

  std::vector<uint16_t> h(src.size());
  ConvertFromF32(DType::kBF16, src.data(), n, h.data());
  for (size_t i = 0; i < src.size(); ++i) EXPECT_EQ(h[i], F32ToBf16(src[i])) << i;  // inf stays inf
  ConvertFromF32(DType::kF16, src.data(), n, h.data());
  for (size_t i = 0; i < src.size(); ++i) {
    const float x = src[i];
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(F16ToF32(h[i])));
    } else {
      EXPECT_EQ(h[i], F32ToF16(std::fmin(std::fmax(x, -65504.f), 65504.f))) << i;
      EXPECT_TRUE(std::isfinite(F16ToF32(h[i])));
    }
  }

  std::vector<uint8_t> b(src.size());
  ConvertFromF32(DType::kFp8E4m3, src.data(), n, b.data());
  for (size_t i = 0; i < src.size(); ++i) {
    if (std::isnan(src[i])) {
      EXPECT_TRUE(std::isnan(Fp8E4m3ToF32(b[i])));
    } else {
      EXPECT_EQ(b[i], F32ToFp8E4m3(src[i])) << i;
    }
  }
  ConvertFromF32(DType::kFp8E5m2, src.data(), n, b.data());
  for (size_t i = 0; i < src.size(); ++i) {
    const float x = src[i];
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(Fp8E5m2ToF32(b[i])));
    } else {
      EXPECT_TRUE(std::isfinite(Fp8E5m2ToF32(b[i]))) << x;  // infinities saturate here
      EXPECT_EQ(b[i], F32ToFp8E5m2(std::fmin(std::fmax(x, -57344.f), 57344.f))) << i;
    }
  }
  EXPECT_EQ(b[12], 0x7b);  // +inf
  EXPECT_EQ(b[13], 0xfb);  // -inf
}

}  // namespace
}  // namespace gk
