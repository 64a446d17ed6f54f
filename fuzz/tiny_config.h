// The tiny Gemma 4 config of the adapter target: 2 layers, hidden 8, 2 heads of 4, 1 KV head.
#pragma once

#include "fuzz_util.h"
#include "model/config.h"
#include "util/guarded_parse.h"

namespace gk::fuzz {

inline const char* kTinyConfigJson = R"({"model_type": "gemma4_text", "vocab_size": 32, "hidden_size": 8,
  "intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
  "head_dim": 4, "global_head_dim": 4, "sliding_window": 4, "layer_types": ["sliding_attention",
  "full_attention"], "max_position_embeddings": 64})";

inline const ModelConfig& TinyConfig() {
  static const ModelConfig* c = [] {
    auto j = ParseJson(kTinyConfigJson, "tiny config");
    Check(j.ok());
    auto config = ParseModelConfig(*j);
    Check(config.ok());
    return new ModelConfig(std::move(config).value());
  }();
  return *c;
}

}  // namespace gk::fuzz
