// Writes a model in the Hugging Face layout with seeded random weights (`gemmakit init`):
// config.json, generation_config.json and model.safetensors (sharded past max_shard_bytes).
// The same seed gives the same bytes on every machine.
#pragma once

#include <cstdint>
#include <string>

#include "model/config.h"
#include "tensor/dtype.h"
#include "util/result.h"

namespace gk {

struct RandomModelOptions {
  uint64_t seed = 0;
  DType dtype = DType::kBF16;  // kBF16 or kF32
  bool write_weights = true;   // false: config files only (planning with real shapes)
  uint64_t max_shard_bytes = 5ull << 30;
};

Status WriteRandomModel(const ModelConfig& config, const std::string& dir, const RandomModelOptions& options);

}  // namespace gk
