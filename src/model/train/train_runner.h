// What the trainer (engines/train/trainer.h) needs from a model on some device: one micro-batch's
// forward and backward passes into the LoRA adapter's (or full fine-tuning's) gradients.
// TrainingModel is the CPU runner; CudaTrainingModel (model/cuda/) the GPU's, which keeps its
// gradients on the device until the optimizer step asks for them. The data order, recipe,
// optimizer, checkpoints and metrics stay in the trainer, the same for both.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "model/train/full_params.h"
#include "util/result.h"

namespace gk {

struct TrainRowView {
  std::span<const int32_t> tokens;
  std::span<const uint8_t> loss_mask;  // per token: 1 when it is a target (its first entry is ignored)
};

struct MicroBatchStats {
  double loss_sum = 0;  // Σ −log p over targets (unscaled)
  int64_t targets = 0;
  int64_t correct = 0;  // targets whose argmax logit is the target (loss-token accuracy)
  int64_t tokens = 0;   // tokens run through the decoder
};

// What the products against the frozen base weights compute (docs/TRAIN.md, "Precision").
enum class TrainPrecision {
  kF32,   // every product in f32 over the weights widened exactly
  kBf16,  // products against bf16 weights (forward, input gradients, the loss head) round their
          // activations (or output gradients) to bf16 and accumulate in f32, as PyTorch, vLLM
          // and llama.cpp do for bf16 models; LoRA factors and their products, attention,
          // norms, the loss and every gradient stay f32. Matrices stored in f32 stay f32.
};

class TrainRunner {
 public:
  virtual ~TrainRunner() = default;

  // TrainingModel::ForwardBackward's contract: the gradients add to the ones accumulated since
  // the last GradientsToHost.
  virtual Status ForwardBackward(std::span<const TrainRowView> rows, float loss_scale, uint64_t dropout_key,
                                 MicroBatchStats* stats) = 0;
  virtual Status Evaluate(std::span<const TrainRowView> rows, MicroBatchStats* stats) = 0;
  // Bytes of activations kept for the backward pass by the last ForwardBackward.
  virtual int64_t activation_bytes() const = 0;
  virtual TrainPrecision precision() const = 0;
  // Where it computes: "cpu", "cuda:0".
  virtual std::string device() const = 0;
  // Full fine-tuning's parameters, null for LoRA.
  virtual FullParams* full_params() { return nullptr; }
  // Before the optimizer reads the adapter's grad_a / grad_b: a runner that accumulates them
  // elsewhere (a GPU) writes them there and starts again from zero. Nothing to do on the CPU.
  virtual Status GradientsToHost() { return Status::Ok(); }
  // After the adapter's factors changed on the host (an optimizer step, a restored checkpoint).
  virtual Status FactorsChanged() { return Status::Ok(); }
  // A device runner: the most device memory in use after any of its passes (every process's);
  // 0 on the CPU.
  virtual uint64_t peak_device_bytes() const { return 0; }
};

}  // namespace gk
