// The packed bf16 weight layout used by the AVX-512 BF16 dot-product kernels.
//
// vdpbf16ps multiplies 16 pairs of bf16 by 16 pairs and adds each pair's two products into
// one f32 lane. With weights laid out so that one 64-byte vector holds 16 output rows × one
// pair of input columns, a broadcast of the matching pair of activations gives 16 outputs'
// partial sums per instruction, and a panel of 16 rows streams through memory sequentially:
//
//   panel p (rows 16p .. 16p+15), pair j (cols 2j, 2j+1):
//     32 bf16 at offset (p · cols/2 + j) · 32:  [r0c0 r0c1 r1c0 r1c1 ... r15c0 r15c1]
//
// A 16-row block of a row-major matrix occupies the same bytes as its panel, so packing is an
// in-place permutation of each block; it needs rows % 16 == 0 and cols % 2 == 0 (true of every
// Gemma matrix). Activations are rounded to bf16 (as PyTorch does in a bf16 model) and
// products accumulate in f32.
#pragma once

#include <cstdint>

#include "tensor/matrix.h"

namespace gk {

bool CanPackBf16(const MatrixView& w);
// Rewrites the matrix in place (data must be writable memory we own) and sets w->packed.
void PackBf16InPlace(MatrixView* w);

}  // namespace gk
