// A LoRA adapter as the serving engine applies it: per (layer, projection) the factors A (r×in)
// and scaling·B (out×r), so a request through the adapter computes
//   y = x·Wᵀ + (x·Aᵀ)·(scaling·B)ᵀ
// on top of the shared base weights (Punica / S-LoRA serving; kernels/lora_segments.h) instead
// of a merged copy of the model. The factors are held in the base model's dtype, as vLLM holds
// them (its lora_dtype "auto"): float32 for f32 models; bf16 otherwise, in the packed panels of
// the CPU's dot-product kernels where it has them, with the rank padded by zero rows to a
// multiple of 16 (a panel; the padding adds nothing). Immutable once built: requests of many
// threads share one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/train/lora.h"
#include "tensor/matrix.h"
#include "util/result.h"

namespace gk {

class LoraWeights {
 public:
  struct Factors {
    MatrixView a;  // (r, in)
    MatrixView b;  // (out, r), scaling folded in
  };

  // Takes the adapter's factors (its gradients are dropped) into `storage` (kF32 or kBF16).
  // The adapter was checked against `config` when it was read (LoraAdapter::LoadPeft /
  // FromSource).
  static std::shared_ptr<const LoraWeights> Create(LoraAdapter adapter, const ModelConfig& config,
                                                   DType storage = DType::kF32);

  // The factors of (layer, target), or null when that projection has no LoRA.
  const Factors* Find(int layer, LoraTarget t) const {
    const int i = index_[size_t(layer) * kNumLoraTargets + size_t(t)];
    return i < 0 ? nullptr : &factors_[size_t(i)];
  }
  int num_layers() const { return int(index_.size() / kNumLoraTargets); }
  int rank() const { return rank_; }
  // Unique in the process, never reused (an address may be, once an adapter is unloaded): a
  // runner that keeps a copy of the factors (the GPU's) keys it by this.
  uint64_t id() const { return id_; }
  int64_t modules() const { return int64_t(factors_.size()); }
  uint64_t bytes() const { return bytes_; }

 private:
  int rank_ = 0;
  uint64_t id_ = 0;
  uint64_t bytes_ = 0;
  std::vector<std::vector<float>> f32_;       // a, b of each module, in module order (kF32)
  std::vector<std::vector<uint16_t>> bf16_;   // the same (kBF16)
  std::vector<Factors> factors_;
  std::vector<int> index_;  // layer * kNumLoraTargets + target -> factors_ index, -1 for none
};

// Where a LoRA adapter comes from, as `serve --lora NAME=PATH[:alpha=A]` and
// /v1/load_lora_adapter name it: a PEFT adapter directory (adapter_config.json), or a Tunix
// Orbax item holding Qwix factors (STEP/model_params; `alpha` given, since Qwix stores none:
// default the rank, a scaling of 1).
struct LoraLocation {
  std::string path;
  double alpha = 0;  // Qwix only; 0: not given
};
// "PATH" or "PATH:alpha=64".
Result<LoraLocation> ParseLoraLocation(const std::string& text);

// Reads the adapter at `where` for the model of `base_dir` (config.json, and the tensor prefix
// `prefix` of its checkpoint): every module must be a projection of this model with its shapes,
// and the rank at most max_rank (0: any). storage: LoraWeights::Create's. Errors are one line
// naming the file.
Result<std::shared_ptr<const LoraWeights>> LoadLoraWeights(const LoraLocation& where, const std::string& base_dir,
                                                           const ModelConfig& config, const std::string& prefix,
                                                           int max_rank, DType storage = DType::kF32);

}  // namespace gk
