// Rearranges loaded weights for the fastest kernel this CPU has: bf16 matrices become packed
// panels (kernels/packed_bf16.h) when the CPU has AVX-512 BF16 and the weights are our own
// copy (an mmap of the checkpoint is read-only and stays row-major).
#pragma once

#include "model/weights.h"

namespace gk {

// Returns the number of matrices packed.
int PackWeightsForCpu(ModelWeights* w);

}  // namespace gk
