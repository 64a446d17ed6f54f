// A non-owning view of a row-major weight matrix (out_features × in_features, the PyTorch
// layout), in its storage dtype. Views never own memory.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace gk {

struct MatrixView {
  DType dtype = DType::kF32;  // kF32 or kBF16 in the engine
  int64_t rows = 0;           // out features
  int64_t cols = 0;           // in features
  const void* data = nullptr;

  bool empty() const { return data == nullptr; }
  int64_t bytes() const { return rows * cols * int64_t(DTypeSize(dtype)); }
  // Row r converted to float32 into out[cols].
  void RowToF32(int64_t r, float* out) const {
    if (dtype == DType::kF32) {
      const float* p = static_cast<const float*>(data) + r * cols;
      for (int64_t c = 0; c < cols; ++c) out[c] = p[c];
    } else {
      const uint16_t* p = static_cast<const uint16_t*>(data) + r * cols;
      for (int64_t c = 0; c < cols; ++c) out[c] = Bf16ToF32(p[c]);
    }
  }
};

}  // namespace gk
