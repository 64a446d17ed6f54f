// A non-owning view of a row-major weight matrix (out_features × in_features, the PyTorch
// layout), in its storage dtype. Views never own memory.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace gk {

// Q8_0 (dtype kQ8_0): int8 codes q with one f16 scale d per block of 32 columns of a row;
// value = d · q, q in [-127, 127], d = max|block| / 127 (as GGUF's Q8_0). Rows are grouped in
// panels of 16 (the last one padded with zero rows) so the int8 dot-product kernels stream
// each panel once and one vector holds 16 rows × 4 columns. A panel is one contiguous stream:
//   bytes [0, 16·cols)        codes: (r, c) at (c / 4) · 64 + (r % 16) · 4 + c % 4, stored as
//                             the unsigned byte q + 128 (the kernels' unsigned operand)
//   bytes [16·cols, +cols)    scales: f16 of (r, block b) at 16·cols + (b · 16 + r % 16) · 2
//   then zeros to a multiple of 64 bytes.
// Needs cols % 32 == 0. Conversions: tensor/q8_0.h.
inline constexpr int64_t kQ8BlockCols = 32;
inline constexpr int64_t kQ8PanelRows = 16;
inline int64_t Q8PanelBytes(int64_t cols) { return 16 * cols + (cols + 63) / 64 * 64; }
inline int64_t Q8Panels(int64_t rows) { return (rows + kQ8PanelRows - 1) / kQ8PanelRows; }

struct MatrixView {
  DType dtype = DType::kF32;  // kF32, kBF16 or kQ8_0 in the engine
  int64_t rows = 0;           // out features
  int64_t cols = 0;           // in features
  const void* data = nullptr;
  // bf16 only: rows interleaved in panels of 16 for the dot-product kernels (layout in
  // kernels/packed_bf16.h); rows % 16 == 0 and cols % 2 == 0.
  bool packed = false;

  bool empty() const { return data == nullptr; }
  int64_t bytes() const {
    if (dtype == DType::kQ8_0) return Q8Panels(rows) * Q8PanelBytes(cols);
    return rows * cols * int64_t(DTypeSize(dtype));
  }
  // Row r converted to float32 into out[cols].
  void RowToF32(int64_t r, float* out) const {
    if (dtype == DType::kQ8_0) {
      const uint8_t* panel = static_cast<const uint8_t*>(data) + (r / 16) * Q8PanelBytes(cols);
      const uint8_t* codes = panel + (r % 16) * 4;
      const uint16_t* scales = reinterpret_cast<const uint16_t*>(panel + 16 * cols) + r % 16;
      for (int64_t b = 0; b < cols / kQ8BlockCols; ++b) {
        const float d = F16ToF32(scales[b * 16]);
        for (int64_t c = b * kQ8BlockCols; c < (b + 1) * kQ8BlockCols; ++c) {
          out[c] = d * float(int(codes[(c / 4) * 64 + c % 4]) - 128);
        }
      }
    } else if (dtype == DType::kF32) {
      const float* p = static_cast<const float*>(data) + r * cols;
      for (int64_t c = 0; c < cols; ++c) out[c] = p[c];
    } else if (packed) {  // element (r, c) of panel r / 16 at pair c / 2, lane (r % 16) · 2 + c % 2
      const uint16_t* p = static_cast<const uint16_t*>(data) + (r / 16) * cols * 16 + (r % 16) * 2;
      for (int64_t c = 0; c < cols; ++c) out[c] = Bf16ToF32(p[(c / 2) * 32 + (c % 2)]);
    } else {
      const uint16_t* p = static_cast<const uint16_t*>(data) + r * cols;
      for (int64_t c = 0; c < cols; ++c) out[c] = Bf16ToF32(p[c]);
    }
  }
};

}  // namespace gk
