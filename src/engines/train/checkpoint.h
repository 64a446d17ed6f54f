// Training checkpoints in a run directory: RUN/checkpoint-<step>/ with
//   adapter_config.json, adapter_model.safetensors   LoRA: the adapter, PEFT layout (loadable
//                                                    by PEFT and vLLM as-is)
//   model.safetensors                                full fine-tuning: the f32 master weights
//                                                    under their Hugging Face names
//   optimizer.safetensors                            AdamW moments: "<name>.exp_avg",
//                                                    "<name>.exp_avg_sq" (f32) per parameter
//   trainer_state.json                               step, RNG state, data position, ... (JSON
//                                                    given by the trainer) + "complete": true
// Writing is atomic per checkpoint: everything goes to RUN/.checkpoint-<step>.tmp-<pid>, each
// file is fsynced, the directory renamed to checkpoint-<step> and RUN fsynced. A checkpoint
// directory is complete exactly when its trainer_state.json exists and parses; a kill at any
// moment leaves either the previous set of checkpoints or the new one, never a half one
// under a checkpoint-<step> name. Older checkpoints beyond keep_last are removed after the
// new one is in place.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/result.h"

namespace gk::train {

// A named float32 tensor (row-major).
struct NamedTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;
  // Saving only: the values live here (shape's element count) instead of in `data`, so that a
  // fully fine-tuned model's masters and moments are written without a copy.
  const float* external = nullptr;
  const float* values() const { return external ? external : data.data(); }
};

struct CheckpointContents {
  bool full = false;                       // full fine-tuning: model.safetensors, no adapter_config
  nlohmann::json adapter_config;           // LoRA: written as adapter_config.json
  std::vector<NamedTensor> params;         // adapter_model.safetensors (LoRA) or model.safetensors (full); F32
  std::vector<NamedTensor> optimizer;      // optimizer.safetensors
  nlohmann::json trainer_state;            // trainer_state.json (must contain "step")
};

// Writes RUN/checkpoint-<step> (step = trainer_state["step"]) atomically, then removes the
// oldest complete checkpoints so that at most keep_last remain (keep_last <= 0: keep all).
// Stale .checkpoint-*.tmp-* directories of earlier, killed runs are removed too.
Status SaveCheckpoint(const std::string& run_dir, const CheckpointContents& contents, int64_t keep_last);

// The newest complete checkpoint directory in RUN, or nullopt when there is none.
Result<std::optional<std::string>> FindLatestCheckpoint(const std::string& run_dir);

// Reads a checkpoint directory written by SaveCheckpoint (all four parts; tensors in file
// order). Errors name the file that is missing or malformed.
Result<CheckpointContents> LoadCheckpoint(const std::string& checkpoint_dir);

}  // namespace gk::train
