// The training loss head on the GPU, TrainingModel::LossHead's twin (issue "CUDA training"):
// the cross-entropy of R target rows against the tied embedding over the whole vocabulary,
// in chunks of the vocabulary, so the R × V logits never exist at once. A first pass keeps each
// row's running max, sum of exp, best logit and target logit (the CPU's online log-sum-exp);
// the backward pass recomputes each chunk's logits, turns them into the loss's gradient
// (kernels/cuda/train_ops.h, the softcap's derivative included) and adds their product with
// the chunk's rows into dh. Products through cuBLASLt in the embedding's precision (bf16
// tables: bf16 operands, rounded or split as kernels/cuda/gemm.h's Run).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/cuda_memory.h"
#include "kernels/cuda/gemm.h"
#include "util/result.h"

namespace gk::cuda {

struct LossHeadArgs {
  const float* h = nullptr;          // (R, D): the final-normed hidden rows of the target positions
  int64_t R = 0;
  DeviceMatrix embed;                // (V, D), the tied head
  const int32_t* targets = nullptr;  // (R): each row's target token (device)
  float cap = 0.f;                   // final logit softcap (0: none)
  float scale = 1.f;                 // dh is the gradient of scale · Σ losses
  float* dh = nullptr;               // (R, D), overwritten; null: the loss only
  int64_t chunk_rows = 0;            // vocabulary rows per chunk; 0: as many as 256 MiB of logits hold
};

struct LossHeadResult {
  double loss_sum = 0;  // Σ (log-sum-exp − target logit), unscaled
  int64_t correct = 0;  // rows whose largest logit (the lowest index among equal ones) is the target
};

class LossHead {
 public:
  // Queued on `stream` (gemm's); returns after the loss has come to the host.
  Result<LossHeadResult> Run(const LossHeadArgs& a, GemmRunner& gemm, cudaStream_t stream);

 private:
  DeviceBuffer<float> z_, stats_;  // a chunk's logits; per row: max, sum, best, target logit, lse
  DeviceBuffer<int64_t> arg_;
  std::vector<float> h_stats_;
  std::vector<int64_t> h_arg_;
  std::vector<int32_t> h_targets_;
};

}  // namespace gk::cuda
