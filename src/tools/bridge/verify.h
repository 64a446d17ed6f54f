// `gemmakit verify A B`: two checkpoints in any supported formats compared tensor by tensor
// after mapping them to Hugging Face / PEFT names (a Tunix Orbax tree through
// model/tunix_layout.h, a Qwix LoRA item to PEFT keys), with the largest absolute and relative
// difference of each tensor; optionally both models' logits on a prompt (engine). Against a
// GGUF file the other checkpoint is mapped to GGUF names instead, through the same plan the
// GGUF export uses, and the GGUF's tensors are dequantized (F32/F16/BF16/Q8_0).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/result.h"

namespace gk::bridge {

struct TensorDiff {
  std::string name;
  std::string problem;       // "" when both have it with the same shape
  double max_abs = 0;        // max |a - b|
  double max_rel = 0;        // max |a - b| / max |b|
};

struct VerifyReport {
  std::string format_a, format_b;
  std::vector<TensorDiff> tensors;  // sorted by name
  int64_t only_a = 0, only_b = 0, mismatched = 0;
  double max_abs = 0, max_rel = 0;
  // --logits
  bool logits_compared = false;
  double logits_max_abs = 0, logits_max_rel = 0;
};

struct VerifyOptions {
  std::string config_dir;            // the Hugging Face config of Orbax/Qwix trees
  double alpha = 0;                  // Qwix LoRA alpha (0: the rank)
  bool logits = false;
  std::vector<int32_t> prompt = {2, 105, 2364, 107, 3689, 563, 496, 11575, 236881, 106};
};

// Formats are detected: a PEFT adapter directory (adapter_config.json), a Hugging Face
// directory or .safetensors file, an Orbax item or step directory (Tunix base tree or Qwix LoRA),
// a GGUF file.
Result<VerifyReport> VerifyCheckpoints(const std::string& a, const std::string& b, const VerifyOptions& o);

}  // namespace gk::bridge
