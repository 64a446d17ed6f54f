// What the trainer (training_model.h) holds in memory, computed from the config alone, so that
// `gemmakit plan` and the trainer's own check before step 1 agree with what a run allocates.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/train/train_runner.h"

namespace gk {

// Bytes the training forward keeps for the backward pass, from the tensors the trainer
// (training_buffers.h) allocates: every layer's input (L+1 of (T, D)) plus the per-layer
// tensors (norm outputs, q/k/v before and after their norms, attention output and log-sum-exp,
// o, residual, gate/up/act, down, LoRA A-products; MoE routing and expert activations; PLE
// gate and projection): all layers' without remat, one (the largest layer's) with remat. No
// T×T scores (flash attention). `elem_bytes` 4 is the f32 CPU trainer (equal to
// TrainingModel::activation_bytes()); 2 is bf16 activations.
struct ActivationOptions {
  int64_t tokens = 0;  // T of one micro-batch
  int lora_rank = 0;   // 0 = no LoRA products
  bool remat = false;
  int elem_bytes = 4;
};
int64_t TrainingActivationBytes(const ModelConfig& c, const ActivationOptions& o);

// LoRA modules of layer l when every projection that exists is adapted (no v_proj on K=V
// layers, no k_proj / v_proj on KV-shared layers).
int LoraProjections(const ModelConfig& c, int l);

// Full fine-tuning's trainable elements (FullParams): every tensor the decoder reads except
// layer_scalar (so not the unused k/v of KV-shared layers).
int64_t FullFineTuneParameters(const ModelConfig& c);

// The trainer's loss head (LossHead): a vocabulary chunk of widened embedding rows and of
// logits (~16 MiB each), plus the normed target rows and their gradients (at most T × D each).
// The T × V logits never exist at once.
double LossHeadBytes(const ModelConfig& c, int64_t tokens);

// LoRA's trainable elements at rank r when every projection that exists is adapted
// (LoraProjections): rank · (in + out) per module.
int64_t LoraParameters(const ModelConfig& c, int rank);

struct MemoryItem {
  std::string what;
  double bytes = 0;
  std::string how;
};

// The CPU trainer's memory for full fine-tuning: weights in their dtype (weight_bytes per
// element), f32 masters, f32 gradients, AdamW's two f32 moments, f32 activations of a
// micro-batch of `tokens`, and the loss head's vocabulary chunk.
struct FullFineTuneMemory {
  int64_t params = 0;
  std::vector<MemoryItem> items;
  double total = 0;
};
FullFineTuneMemory EstimateFullFineTune(const ModelConfig& c, int weight_bytes, int64_t tokens, bool remat);

// The GPU trainer's device memory for LoRA (docs/TRAIN.md, "On a GPU"): the base in the
// checkpoint's dtype, the factors and their gradients in f32 (AdamW's moments stay on the host),
// the f32 activations of a micro-batch of `tokens`, the attention's workspace
// (kernels/attention_train_workspace.h, f32 operands in either precision), the loss head's chunk
// of logits and cuBLASLt's workspace and staging (the products' bf16 inputs: one copy in bf16
// precision, three exact terms in f32).
struct GpuLoraRun {
  int64_t tokens = 0;  // per micro-batch
  int rank = 16;
  bool remat = true;
  TrainPrecision precision = TrainPrecision::kBf16;
  int64_t trainable = -1;  // the adapter's parameter count where known (its target modules), else every projection's
  int weight_bytes = 2;    // per base parameter on the device: 2 (bf16 checkpoint) or 4 (f32)
};
struct GpuLoraMemory {
  int64_t trainable = 0;
  std::vector<MemoryItem> items;
  double total = 0;
};
GpuLoraMemory EstimateGpuLoraTraining(const ModelConfig& c, const GpuLoraRun& run);

}  // namespace gk
