#include "model/weight_packing.h"

#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "kernels/packed_bf16.h"

namespace gk {

int PackWeightsForCpu(ModelWeights* w) {
  if (w->mmapped || ActiveIsa() != Isa::kAvx512 || !CpuHasAvx512Bf16()) return 0;
  int packed = 0;
  auto pack = [&](MatrixView& m) {
    if (CanPackBf16(m)) {
      PackBf16InPlace(&m);
      ++packed;
    }
  };
  ForEachMatrix(*w, [&](MatrixView& m) {
    // The per-layer embedding table is only read row by row: it stays row-major.
    if (&m != &w->ple_embed) pack(m);
  });
  return packed;
}

}  // namespace gk
