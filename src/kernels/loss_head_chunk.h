// How many vocabulary rows the GPU loss head (kernels/cuda/loss_head.cu) scores at once, in a
// header without CUDA so that `gemmakit plan` counts the logits buffer the GPU trainer allocates.
// The CPU trainer's loss head keeps its own, cache-sized rule (model/train/training_model.cc).
#pragma once

#include <algorithm>
#include <cstdint>

namespace gk {

// R rows of f32 logits per chunk within 256 MiB; at least 256 vocabulary rows so that the
// products stay wide, and at most the vocabulary, which may be fewer (one rank's shard under
// tensor parallelism). std::clamp is not used: its bounds would cross there, which is undefined.
inline int64_t LossHeadChunkRows(int64_t R, int64_t vocab) {
  const int64_t budget = (int64_t(256) << 20) / 4 / std::max<int64_t>(R, 1);
  return std::min<int64_t>(std::max<int64_t>(budget, 256), std::max<int64_t>(vocab, 1));
}

}  // namespace gk
