// Where a merge or a server reads LoRA factors from: a PEFT adapter directory, or
// (lora_source_orbax.cc) a Tunix/Qwix Orbax item. Factors are read one module at a time, in
// PEFT's layout and float32, so a merge holds one module's factors at once, not the adapter.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "util/result.h"

namespace gk {

struct LoraFactors {
  int64_t rank = 0, in = 0, out = 0;
  std::vector<float> a;  // (rank, in)
  std::vector<float> b;  // (out, rank)
};

class LoraSource {
 public:
  virtual ~LoraSource() = default;
  // Hugging Face module paths that carry a LoRA (e.g. model.language_model.layers.3.self_attn.q_proj).
  virtual std::vector<std::string> Modules() const = 0;
  virtual Result<LoraFactors> Factors(const std::string& module) const = 0;
  virtual float scaling() const = 0;        // alpha / r (alpha / sqrt(r) with rsLoRA)
  virtual std::string Describe() const = 0;  // for messages: "PEFT adapter DIR (r 64, alpha 64, 420 modules)"
};

// A PEFT adapter directory (adapter_config.json + adapter_model.safetensors, F32/BF16/F16).
Result<std::unique_ptr<LoraSource>> OpenPeftLoraSource(const std::string& dir);

// The Qwix LoRA factors of a Tunix Orbax item (STEP/model_params: `<weight>_lora_a/_b` arrays
// named by the tree in _METADATA), converted to PEFT's layout per module (model/tunix_layout.h).
// base_dir gives the model's config.json and tensor prefix. alpha: Qwix stores no alpha; it is
// read from the item's metadata when present, else from `alpha` (the Tunix recipe's), else rank.
Result<std::unique_ptr<LoraSource>> OpenQwixLoraSource(const std::string& item_dir, const std::string& base_dir,
                                                       double alpha = 0);

}  // namespace gk
