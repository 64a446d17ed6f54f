// Conversions into and out of the Q8_0 matrix layout (described above MatrixView in
// tensor/matrix.h): quantizing a float/bf16 matrix, and the checkpoint form, which is
// GGUF-like and row-major: int8 codes (rows, cols) plus f16 scales (rows, cols / 32).
#pragma once

#include <cstdint>

#include "tensor/matrix.h"

namespace gk {

// Whether a matrix of this width can be stored as Q8_0 (whole blocks of 32 columns).
inline bool Q8Supports(int64_t cols) { return cols > 0 && cols % kQ8BlockCols == 0; }
// Bytes of a Q8_0 matrix of this shape (whole panels).
inline int64_t Q8Bytes(int64_t rows, int64_t cols) { return Q8Panels(rows) * Q8PanelBytes(cols); }

// The f16 scale of one block and the codes under it: d = max|x| / 127 rounded to f16, then
// q = round(x / d) with the rounded d, so that d · q is what the kernels compute with.
uint16_t QuantizeBlockQ8(const float* x, int8_t* q);
// QuantizeBlockQ8 over the n / 32 blocks of a row (n % 32 == 0): AVX-512 where the CPU has it,
// with the same bytes as the scalar loop.
void QuantizeRowQ8(const float* x, int64_t n, int8_t* q, uint16_t* scales);
void QuantizeRowQ8Scalar(const float* x, int64_t n, int8_t* q, uint16_t* scales);

// Quantizes panels [p0, p1) of src (any dtype and layout RowToF32 reads) into dst, which
// holds Q8Bytes(src.rows, src.cols) bytes. Panels are independent: threads may split them.
void QuantizePanelsQ8(const MatrixView& src, int64_t p0, int64_t p1, void* dst);

// Panels [p0, p1) from the checkpoint form: q (rows × cols) and scales (rows × cols / 32, f16).
void PackPanelsQ8(const int8_t* q, const uint16_t* scales, int64_t rows, int64_t cols, int64_t p0, int64_t p1,
                  void* dst);

// The checkpoint form of a Q8_0 matrix: q (rows × cols) and scales (rows × cols / 32, f16);
// either may be null to skip it.
void UnpackQ8(const MatrixView& w, int8_t* q, uint16_t* scales);

}  // namespace gk
