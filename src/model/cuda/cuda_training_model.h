// LoRA fine-tuning's forward and backward passes on one CUDA device: TrainingModel's twin
// (model/train/training_model.h has the contract and the formulas), for the GPU trainer of the
// issue "CUDA training". The frozen base sits on the GPU in its checkpoint dtype (bf16 or f32),
// the adapter's factors and their gradients in f32; each micro-batch is packed (rows
// concatenated, attention never crossing a row) and every layer's forward pass is recomputed
// just before its backward pass (remat): only the layers' inputs are kept.
//
// Runs dense Gemma 4 (K=V global layers, proportional RoPE, layer scalars), E2B/E4B (per-layer
// embeddings, KV sharing, double-wide MLP), 26B-A4B (the MoE block, routed on the host by the
// CPU's functions from the GPU's router logits) and Gemma 3. LoRA dropout draws TrainingModel's
// masks (the same keys, the same bits). Refused with one line: full fine-tuning (not yet on the GPU).
//
// Gradients accumulate on the device over micro-batches; DownloadGradients brings them into
// the adapter's grad_a / grad_b (and zeroes the device's) for the host's optimizer step, after
// which UploadFactors sends the updated factors back.
#pragma once

#include <memory>
#include <span>

#include "model/config.h"
#include "model/train/lora.h"
#include "model/train/train_runner.h"
#include "model/weights.h"
#include "util/result.h"

namespace gk {

struct CudaTrainingOptions {
  int device = 0;
  int64_t max_tokens = 4096;  // tokens per micro-batch the buffers are sized for
  // kF32: the products in f32 (bf16 weights take the activations as three exact bf16 terms:
  // GemmRunner::set_exact_split); kBf16: bf16
  // weights take bf16-rounded activations, with f32 accumulation (TrainingModel's bf16
  // precision). Attention, the LoRA products, norms and the loss stay f32 in both, as on the CPU.
  TrainPrecision precision = TrainPrecision::kF32;
};

class CudaTrainingModel final : public TrainRunner {
 public:
  // The adapter is the caller's and outlives the model; its factors are uploaded now. The
  // weights are copied: the caller may free them after.
  static Result<std::unique_ptr<CudaTrainingModel>> Create(const ModelConfig& config, const ModelWeights& weights,
                                                           LoraAdapter* adapter, const CudaTrainingOptions& options);
  // Random weights of config's shape made on the GPU (bench train --preset: no checkpoint), in
  // dtype (bf16 or f32), as CudaModel::CreateRandom makes them.
  static Result<std::unique_ptr<CudaTrainingModel>> CreateRandom(const ModelConfig& config, DType dtype, uint64_t seed,
                                                                 LoraAdapter* adapter, const CudaTrainingOptions& options);
  ~CudaTrainingModel() override;

  // As TrainingModel::ForwardBackward; the gradients add to the device's.
  Status ForwardBackward(std::span<const TrainRowView> rows, float loss_scale, uint64_t dropout_key,
                         MicroBatchStats* stats) override;
  Status Evaluate(std::span<const TrainRowView> rows, MicroBatchStats* stats) override;
  // The f32 activations the device holds for the backward pass (the layers' inputs and one
  // layer's tensors: remat).
  int64_t activation_bytes() const override;
  TrainPrecision precision() const override;
  std::string device() const override;
  // The device's accumulated gradients into the adapter's grad_a / grad_b (overwritten); the
  // device's are zeroed.
  Status GradientsToHost() override { return DownloadGradients(); }
  Status FactorsChanged() override { return UploadFactors(); }
  Status DownloadGradients();
  // The adapter's factors (changed on the host: an optimizer step, a restored checkpoint) to the device.
  Status UploadFactors();

  const ModelConfig& config() const;
  // Device bytes the model holds: weights, factors and gradients, activations and workspaces.
  uint64_t device_bytes() const;
  // The device's memory in use (by every process), at its highest after a pass of this model.
  uint64_t peak_device_bytes() const override;
  // gemmakit plan's estimate of the run (EstimateGpuLoraTraining), which Create checked against
  // the device's free memory.
  double planned_device_bytes() const;

 private:
  struct Impl;
  explicit CudaTrainingModel(std::unique_ptr<Impl> impl);
  static Result<std::unique_ptr<CudaTrainingModel>> Make(const ModelConfig& config, const ModelWeights& weights,
                                                         LoraAdapter* adapter, const CudaTrainingOptions& options,
                                                         uint64_t random_seed);
  std::unique_ptr<Impl> impl_;
};

// Whether CudaTrainingModel runs this config and adapter: one line saying what it does not.
Status CheckCudaTrainingSupport(const ModelConfig& c, const LoraAdapter* adapter);

}  // namespace gk
