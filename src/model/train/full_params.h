// Full fine-tuning's trainable parameters: every matrix and norm of the decoder (the Hugging
// Face tensors the config calls for; `layer_scalar` stays frozen, as transformers keeps it as a
// buffer) as a float32 master copy with a float32 gradient.
//
// The forward and backward passes read the model's own weights, in the checkpoint's dtype (bf16
// or f32): after each optimizer step Sync() rounds the masters into them, so a bf16 model is
// computed in bf16 and updated in f32 (mixed precision with master weights). Masters are kept
// in checkpoint space (Gemma 3 norms store w − 1 on disk and fold + 1 in memory).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/config.h"
#include "model/weights.h"
#include "tensor/thread_pool.h"
#include "util/result.h"

namespace gk {

struct FullParam {
  std::string name;            // Hugging Face tensor name (with the checkpoint's prefix)
  std::vector<int64_t> shape;
  DType dtype = DType::kF32;   // what the model holds and RUN/model is written in (bf16 or f32)
  std::vector<float> value;    // the f32 master
  std::vector<float> grad;
  // The model's copy, which Sync() writes.
  MatrixView* matrix = nullptr;
  std::vector<MatrixView>* experts = nullptr;  // an expert stack in one contiguous block
  std::vector<float>* vec = nullptr;           // a norm or scale (f32 in memory, + add)
  float add = 0.f;
  int64_t numel() const { return int64_t(value.size()); }
};

class FullParams {
 public:
  // The model must be loaded into memory the trainer owns (WeightLoadMode::kCopy), unpacked,
  // bf16 or f32. Vector masters are read from the checkpoint in model_dir (the in-memory
  // copies have Gemma 3's + 1 folded in). Gradients are looked up by the weights' addresses:
  // create this once *weights is where it stays (TrainingModel creates it from its own).
  static Result<FullParams> Create(const std::string& model_dir, const ModelConfig& config, ModelWeights* weights);

  std::vector<FullParam>& params() { return params_; }
  const std::vector<FullParam>& params() const { return params_; }
  // The gradient of a weight of the model (a MatrixView of ModelWeights, one expert's view, or a
  // norm vector), or null when it is not trained (layer_scalar) or not part of this model.
  float* Grad(const void* weight) const;
  void ZeroGrads();
  // Rounds every master into the model's weights (their storage dtype).
  void Sync(ThreadPool& pool);
  int64_t ParameterCount() const;

  // Writes the trained model as a complete Hugging Face checkpoint: source_dir's files, tensor
  // for tensor and shard for shard, with every trained tensor rounded from its master into its
  // dtype there, every other one (layer_scalar, the unused k/v of KV-shared layers, vision and
  // audio towers) as it is; config, generation config, tokenizer and shard index copied. The
  // directory is written beside out_dir and renamed into place (a kill leaves the old one).
  Status WriteCheckpoint(const std::string& source_dir, const std::string& out_dir) const;

 private:
  std::vector<FullParam> params_;
  std::unordered_map<const void*, float*> grad_of_;
};

}  // namespace gk
