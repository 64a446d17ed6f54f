#pragma GCC diagnostic ignored "-Wuninitialized"  // GCC 12's own AVX-512 headers
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "tensor/q8_0.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace gk {
namespace {

uint8_t* Panel(void* dst, int64_t cols, int64_t p) { return static_cast<uint8_t*>(dst) + p * Q8PanelBytes(cols); }

// Round to nearest even for |v| < 2²², without a libm call: adding 1.5 · 2²³ leaves no
// fraction bits, so the FPU's default rounding does the work.
inline float RoundEven(float v) { return (v + 12582912.f) - 12582912.f; }

// Writes row i (0..15) of a panel: the row's codes (biased to unsigned) and its scales.
void PutRow(uint8_t* panel, int64_t cols, int64_t i, const int8_t* q, const uint16_t* scales) {
  for (int64_t g = 0; g < cols / 4; ++g) {
    uint32_t v;
    std::memcpy(&v, q + 4 * g, 4);
    v ^= 0x80808080u;  // q + 128 in each byte
    std::memcpy(panel + g * 64 + i * 4, &v, 4);
  }
  uint16_t* s = reinterpret_cast<uint16_t*>(panel + 16 * cols);
  for (int64_t b = 0; b < cols / kQ8BlockCols; ++b) s[b * 16 + i] = scales[b];
}

// Rows past the matrix's end: code 128 (q = 0), scale 0; and the panel's tail padding.
void ClearPanel(uint8_t* panel, int64_t cols) {
  std::memset(panel, 128, size_t(16 * cols));
  std::memset(panel + 16 * cols, 0, size_t(Q8PanelBytes(cols) - 16 * cols));
}

}  // namespace

uint16_t QuantizeBlockQ8(const float* x, int8_t* q) {
  float amax = 0.f;
  for (int i = 0; i < kQ8BlockCols; ++i) amax = std::max(amax, std::fabs(x[i]));
  uint16_t d16 = F32ToF16(amax / 127.f);
  if ((d16 & 0x7fff) >= 0x7c00) d16 = 0x7bff;  // inf/NaN: largest finite f16
  const float d = F16ToF32(d16);
  const float id = d > 0.f ? 1.f / d : 0.f;
  for (int i = 0; i < kQ8BlockCols; ++i) {
    // Clamped: the rounded scale may be a little below amax / 127.
    q[i] = int8_t(RoundEven(std::clamp(x[i] * id, -127.f, 127.f)));
  }
  return d16;
}

void QuantizeRowQ8Scalar(const float* x, int64_t n, int8_t* q, uint16_t* scales) {
  for (int64_t b = 0; b < n / kQ8BlockCols; ++b) {
    scales[b] = QuantizeBlockQ8(x + b * kQ8BlockCols, q + b * kQ8BlockCols);
  }
}

namespace {

// Quantizing a 1B model is ~10⁹ blocks' worth of work at load: vectorized, 32 values at once.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void QuantizeRowQ8Avx512(const float* x, int64_t n, int8_t* q,
                                                                            uint16_t* scales) {
  const __m512 lo = _mm512_set1_ps(-127.f), hi = _mm512_set1_ps(127.f);
  for (int64_t b = 0; b < n / kQ8BlockCols; ++b) {
    const __m512 v0 = _mm512_loadu_ps(x + b * 32), v1 = _mm512_loadu_ps(x + b * 32 + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
    uint16_t d16 = F32ToF16(amax / 127.f);
    if ((d16 & 0x7fff) >= 0x7c00) d16 = 0x7bff;
    const float d = F16ToF32(d16);
    const __m512 id = _mm512_set1_ps(d > 0.f ? 1.f / d : 0.f);
    // Clamp, then round to nearest even (the default mode), as the scalar loop.
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v0, id), lo), hi));
    const __m512i q1 = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v1, id), lo), hi));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + b * 32), _mm512_cvtsepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + b * 32 + 16), _mm512_cvtsepi32_epi8(q1));
    scales[b] = d16;
  }
}

}  // namespace

void QuantizeRowQ8(const float* x, int64_t n, int8_t* q, uint16_t* scales) {
  static const bool avx512 = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
  }();
  if (avx512) {
    QuantizeRowQ8Avx512(x, n, q, scales);
  } else {
    QuantizeRowQ8Scalar(x, n, q, scales);
  }
}

void QuantizePanelsQ8(const MatrixView& src, int64_t p0, int64_t p1, void* dst) {
  const int64_t C = src.cols, nb = C / kQ8BlockCols;
  std::vector<float> row(static_cast<size_t>(C));
  std::vector<int8_t> q(static_cast<size_t>(C));
  std::vector<uint16_t> s(static_cast<size_t>(nb));
  for (int64_t p = p0; p < p1; ++p) {
    uint8_t* panel = Panel(dst, C, p);
    ClearPanel(panel, C);
    for (int64_t i = 0; i < 16 && p * 16 + i < src.rows; ++i) {
      src.RowToF32(p * 16 + i, row.data());
      QuantizeRowQ8(row.data(), C, q.data(), s.data());
      PutRow(panel, C, i, q.data(), s.data());
    }
  }
}

void PackPanelsQ8(const int8_t* q, const uint16_t* scales, int64_t rows, int64_t cols, int64_t p0, int64_t p1,
                  void* dst) {
  const int64_t nb = cols / kQ8BlockCols;
  for (int64_t p = p0; p < p1; ++p) {
    uint8_t* panel = Panel(dst, cols, p);
    ClearPanel(panel, cols);
    for (int64_t i = 0; i < 16 && p * 16 + i < rows; ++i) {
      const int64_t r = p * 16 + i;
      PutRow(panel, cols, i, q + r * cols, scales + r * nb);
    }
  }
}

void UnpackQ8(const MatrixView& w, int8_t* q, uint16_t* scales) {
  const int64_t C = w.cols, nb = C / kQ8BlockCols;
  for (int64_t r = 0; r < w.rows; ++r) {
    const uint8_t* panel = static_cast<const uint8_t*>(w.data) + (r / 16) * Q8PanelBytes(C);
    const int64_t i = r % 16;
    if (q) {
      for (int64_t g = 0; g < C / 4; ++g) {
        uint32_t v;
        std::memcpy(&v, panel + g * 64 + i * 4, 4);
        v ^= 0x80808080u;
        std::memcpy(q + r * C + 4 * g, &v, 4);
      }
    }
    if (scales) {
      const uint16_t* s = reinterpret_cast<const uint16_t*>(panel + 16 * C);
      for (int64_t b = 0; b < nb; ++b) scales[r * nb + b] = s[b * 16 + i];
    }
  }
}

}  // namespace gk
