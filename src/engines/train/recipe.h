// Training recipes: a TOML file (toml++) whose every key can be overridden on the command line
// with --set key=value (dotted keys for tables, e.g. --set lora.rank=8). Unknown keys, wrong
// types and out-of-range values are errors that name the key (and the file and line for TOML
// syntax errors). Recipe format: docs/TRAIN.md; examples: recipes/*.toml.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/result.h"

namespace gk::train {

struct TrainRecipe {
  // Top level.
  std::string model;          // base checkpoint directory (Hugging Face layout)
  std::string data;           // a CodeV-R1 JSONL file or a `data prepare` directory
  std::string out;            // the run directory
  uint64_t seed = 0;
  // [data]
  int64_t max_seq_len = 3072;
  std::string loss = "assistant";  // "assistant" | "all"
  int64_t max_rows = -1;            // rows of the JSONL to read (-1: all)
  bool shuffle = true;              // deterministic by seed, per epoch
  std::string batching = "packed";  // "packed" (rows concatenated, no padding) | "padded" (rows padded to the longest)
  std::string chat_template;        // a JSONL is rendered by this template file or checkpoint template name
                                    // ("": the checkpoint's, else the built-in; docs/CHAT_TEMPLATES.md)
  // [lora]
  int rank = 64;
  double alpha = 64;
  double dropout = 0.05;
  bool use_rslora = false;
  std::string target_modules =  // regex, fullmatch over Hugging Face module names (PEFT)
      R"(^(?!.*vision).*\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)$)";
  bool full_finetune = false;   // train every matrix and norm instead of LoRA factors (the rest of
                                // [lora] is ignored); writes RUN/model/, a complete checkpoint
  std::string init_adapter;     // start from this PEFT adapter instead of PEFT's initialisation
                                // (its rank, alpha and modules must match the recipe's)
  // [optim]
  double learning_rate = 1e-4;
  int64_t warmup_steps = 100;
  double end_learning_rate = 0.0;
  double weight_decay = 0.001;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double max_grad_norm = 0.0;  // 0: no clipping
  // [batch]
  int64_t micro_batch = 1;      // sequences per forward/backward
  int64_t grad_accum = 8;       // micro-batches per optimizer step
  int64_t epochs = 1;
  int64_t max_steps = -1;       // stop after this many optimizer steps (-1: the epochs decide)
  // [train]
  std::string precision = "bf16";  // "bf16": products against the frozen bf16 base take bf16
                                   // activations (f32 accumulation, f32 LoRA, gradients, AdamW);
                                   // "f32": every product in f32 (docs/TRAIN.md, "Precision")
  // [memory]
  bool remat = true;            // recompute each decoder layer's activations in the backward pass
  int64_t max_bytes = 0;        // a full fine-tune whose estimate exceeds this (0: the memory
                                // available now) is refused before it loads the model
  // [checkpoint]
  int64_t save_every = 100;     // optimizer steps; 0: only at the end
  int64_t keep_last = 3;
  // [log]
  int64_t log_every = 1;

  // The recipe as a JSON object in the TOML's table structure (for training_run.json).
  nlohmann::json ToJson() const;
};

// Parses TOML text; `source` names it in errors.
Result<TrainRecipe> ParseRecipe(const std::string& toml_text, const std::string& source);
Result<TrainRecipe> LoadRecipe(const std::string& path);
// Applies "key=value" overrides in order. Keys are the TOML paths ("model", "lora.rank",
// "optim.learning_rate", ...); values are parsed by the key's type (bool: true/false,
// integers, floats, strings as-is).
Status ApplyOverrides(TrainRecipe& recipe, const std::vector<std::string>& overrides);
// Range and consistency checks (rank >= 1, 0 <= dropout < 1, loss mode, batching, ...).
Status ValidateRecipe(const TrainRecipe& recipe);

}  // namespace gk::train
