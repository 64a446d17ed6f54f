#include "kernels/packed_bf16.h"

#include <cstring>
#include <vector>

namespace gk {

bool CanPackBf16(const MatrixView& w) {
  return w.dtype == DType::kBF16 && !w.packed && w.rows % 16 == 0 && w.cols % 2 == 0 && w.rows > 0;
}

void PackBf16InPlace(MatrixView* w) {
  const int64_t C = w->cols;
  uint16_t* base = static_cast<uint16_t*>(const_cast<void*>(w->data));
  std::vector<uint16_t> block(size_t(16 * C));
  for (int64_t p = 0; p < w->rows / 16; ++p) {
    uint16_t* panel = base + p * 16 * C;
    std::memcpy(block.data(), panel, block.size() * sizeof(uint16_t));
    for (int64_t r = 0; r < 16; ++r) {
      for (int64_t j = 0; j < C / 2; ++j) {
        panel[j * 32 + r * 2] = block[size_t(r * C + 2 * j)];
        panel[j * 32 + r * 2 + 1] = block[size_t(r * C + 2 * j + 1)];
      }
    }
  }
  w->packed = true;
}

}  // namespace gk
