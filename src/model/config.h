// Model configuration: the Gemma 4 text decoder fields of config.json (read from `text_config`
// when present, else the top level) and Gemma 3 as a second architecture.
// Dimension letters used across model/: V vocab, D hidden, F MLP width, N query heads,
// K kv heads (per layer type), H head dim (per layer type), L layers, T tokens, P PLE width.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "util/result.h"

namespace gk {

enum class Arch { kGemma4, kGemma3 };
enum class LayerType { kSliding, kFull };

struct RopeParams {
  float theta = 10000.f;
  float partial_rotary_factor = 1.f;  // fraction of the head dim that rotates
  float scaling_factor = 1.f;         // linear position scaling (Gemma 3 4B+ global layers)
};

struct ModelConfig {
  Arch arch = Arch::kGemma4;
  int vocab_size = 0;             // V: embedding rows
  int hidden_size = 0;            // D
  int intermediate_size = 0;      // F
  int num_layers = 0;             // L
  int num_heads = 0;              // N
  int num_kv_heads = 0;           // K on sliding layers (and full layers without k_eq_v)
  int head_dim = 0;               // H on sliding layers
  int global_head_dim = 0;        // H on full layers (Gemma 4); = head_dim for Gemma 3
  int num_global_kv_heads = 0;    // K on full k_eq_v layers
  bool attention_k_eq_v = false;  // full layers: V is the raw K projection, no v_proj
  int sliding_window = 0;
  std::vector<LayerType> layer_types;
  float rms_norm_eps = 1e-6f;
  float final_logit_softcap = 0.f;  // 0 = none
  float query_pre_attn_scalar = 0.f;  // Gemma 3: scores scaled by its inverse sqrt
  int max_position_embeddings = 0;
  RopeParams rope_sliding, rope_full;
  bool tie_word_embeddings = true;
  // Per-layer embeddings (E2B/E4B).
  int hidden_size_per_layer_input = 0;  // P; 0 = no PLE
  int vocab_size_per_layer_input = 0;
  // KV sharing (E2B/E4B): the last num_kv_shared_layers layers reuse earlier layers' KV.
  int num_kv_shared_layers = 0;
  bool use_double_wide_mlp = false;
  // Mixture of experts (26B-A4B).
  bool enable_moe_block = false;
  int num_experts = 0;
  int top_k_experts = 0;
  int moe_intermediate_size = 0;
  // Per-layer attention shapes where a layer differs from its type's values above (what is left
  // of transformers' per_layer_config after ParseModelConfig folds the per-type values into
  // global_head_dim / num_global_kv_heads): 0 = the type's value. Empty, or num_layers entries.
  std::vector<int> layer_head_dim, layer_kv_heads;
  int bos_token_id = 2, eos_token_id = 1, pad_token_id = 0;
  std::vector<int> eos_token_ids;  // every id that ends generation
  std::string torch_dtype = "bfloat16";

  // Derived per-layer facts.
  bool IsFull(int l) const { return layer_types[l] == LayerType::kFull; }
  int HeadDim(int l) const {
    if (!layer_head_dim.empty() && layer_head_dim[size_t(l)] > 0) return layer_head_dim[size_t(l)];
    return IsFull(l) ? global_head_dim : head_dim;
  }
  bool KEqV(int l) const { return arch == Arch::kGemma4 && attention_k_eq_v && IsFull(l); }
  int KvHeads(int l) const {
    if (!layer_kv_heads.empty() && layer_kv_heads[size_t(l)] > 0) return layer_kv_heads[size_t(l)];
    return KEqV(l) ? num_global_kv_heads : num_kv_heads;
  }
  int MaxHeadDim() const;
  int MaxKvHeads() const;
  // Whether every layer of a type has that type's head dim and kv heads (no per-layer
  // overrides): what formats with one value per layer type (GGUF) can describe.
  bool UniformPerLayerType() const { return layer_head_dim.empty() && layer_kv_heads.empty(); }
  const RopeParams& Rope(int l) const { return IsFull(l) ? rope_full : rope_sliding; }
  // The layer whose KV cache layer l attends over (itself unless KV-shared).
  int KvSourceLayer(int l) const;
  bool IsKvShared(int l) const { return KvSourceLayer(l) != l; }
  // Whether some KV-shared layer reads layer l's cache.
  bool IsKvSource(int l) const;
  int MlpWidth(int l) const;
  int64_t ParameterCount() const;
};

// Limits of what a config may declare (real Gemma checkpoints: dozens of layers, sizes up to
// 262144), so that a crafted config cannot make per-layer tables take gigabytes.
inline constexpr int kMaxLayers = 4096;
inline constexpr int kMaxDimension = 1 << 24;

// Parses a config.json object. Errors name the missing or invalid field; never throws.
Result<ModelConfig> ParseModelConfig(const nlohmann::json& j);
// model_dir: a Hugging Face checkpoint directory, or one of its .safetensors files (config.json,
// tokenizer and generation_config.json are then read from the file's directory).
Result<ModelConfig> LoadModelConfig(const std::string& model_dir);
// The directory that holds a checkpoint's config and tokenizer: the path itself, or the
// directory of a .safetensors file.
std::string CheckpointDirOf(const std::string& dir_or_file);
// Serialises in the Hugging Face layout: Gemma 4 as Gemma4ForConditionalGeneration with a
// text_config (multimodal layout), Gemma 3 as Gemma3ForCausalLM.
nlohmann::json ModelConfigToJson(const ModelConfig& c);
// Checks internal consistency (divisibility, layer count, window...).
Status ValidateModelConfig(const ModelConfig& c);

}  // namespace gk
