#include "model/presets.h"

namespace gk {
namespace {

std::vector<LayerType> Pattern(int layers, int period) {
  std::vector<LayerType> t;
  for (int l = 0; l < layers; ++l) t.push_back((l + 1) % period == 0 ? LayerType::kFull : LayerType::kSliding);
  t.back() = LayerType::kFull;  // the last layer is always full (HF config __post_init__)
  return t;
}

ModelConfig Gemma4Base() {
  ModelConfig c;
  c.arch = Arch::kGemma4;
  c.vocab_size = 262144;
  c.head_dim = 256;
  c.global_head_dim = 512;
  c.rms_norm_eps = 1e-6f;
  c.final_logit_softcap = 30.f;
  c.rope_sliding = {10000.f, 1.f, 1.f};
  c.rope_full = {1000000.f, 0.25f, 1.f};
  c.eos_token_ids = {1, 106};
  c.vocab_size_per_layer_input = 262144;
  return c;
}

ModelConfig Gemma3Base(int layers, int d, int f) {
  ModelConfig c;
  c.arch = Arch::kGemma3;
  c.vocab_size = 262144;
  c.hidden_size = d;
  c.intermediate_size = f;
  c.num_layers = layers;
  c.num_heads = 4;
  c.num_kv_heads = 1;
  c.head_dim = c.global_head_dim = 256;
  c.num_global_kv_heads = 1;
  c.sliding_window = 512;
  c.layer_types = Pattern(layers, 6);
  c.layer_types.back() = (layers % 6 == 0) ? LayerType::kFull : LayerType::kSliding;
  c.query_pre_attn_scalar = 256.f;
  c.rope_sliding = {10000.f, 1.f, 1.f};
  c.rope_full = {1000000.f, 1.f, 1.f};
  c.max_position_embeddings = 32768;
  c.eos_token_ids = {1, 106};
  return c;
}

}  // namespace

std::vector<std::string> PresetNames() {
  return {"tiny", "tiny-e2b", "tiny-moe", "e2b", "e4b", "26b-a4b", "31b", "gemma3-270m", "gemma3-1b"};
}

Result<ModelConfig> PresetConfig(const std::string& name) {
  ModelConfig c = Gemma4Base();
  if (name == "tiny" || name == "tiny-e2b" || name == "tiny-moe") {
    c.hidden_size = 128;
    c.intermediate_size = 512;
    c.num_layers = 6;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim = 32;
    c.global_head_dim = 64;
    c.num_global_kv_heads = 1;
    c.attention_k_eq_v = true;
    c.sliding_window = 16;
    c.max_position_embeddings = 4096;
    c.layer_types = Pattern(6, 6);
    if (name == "tiny-e2b") {
      c.attention_k_eq_v = false;
      c.num_global_kv_heads = c.num_kv_heads;
      c.hidden_size_per_layer_input = 16;
      c.num_kv_shared_layers = 2;
      c.use_double_wide_mlp = true;
      c.layer_types = Pattern(6, 3);
    } else if (name == "tiny-moe") {
      c.enable_moe_block = true;
      c.num_experts = 8;
      c.top_k_experts = 2;
      c.moe_intermediate_size = 64;
    }
  } else if (name == "31b") {
    c.hidden_size = 5376;
    c.intermediate_size = 21504;
    c.num_layers = 60;
    c.num_heads = 32;
    c.num_kv_heads = 16;
    c.num_global_kv_heads = 4;
    c.attention_k_eq_v = true;
    c.sliding_window = 1024;
    c.max_position_embeddings = 262144;
    c.layer_types = Pattern(60, 6);
  } else if (name == "26b-a4b") {
    c.hidden_size = 2816;
    c.intermediate_size = 2112;  // the dense MLP beside the experts
    c.num_layers = 30;
    c.num_heads = 16;
    c.num_kv_heads = 8;
    c.num_global_kv_heads = 2;
    c.attention_k_eq_v = true;
    c.sliding_window = 1024;
    c.max_position_embeddings = 262144;
    c.layer_types = Pattern(30, 6);
    c.enable_moe_block = true;
    c.num_experts = 128;
    c.top_k_experts = 8;
    c.moe_intermediate_size = 704;
  } else if (name == "e4b") {
    c.hidden_size = 2560;
    c.intermediate_size = 10240;
    c.num_layers = 42;
    c.num_heads = 8;
    c.num_kv_heads = 2;
    c.num_global_kv_heads = 2;
    c.sliding_window = 512;
    c.max_position_embeddings = 131072;
    c.hidden_size_per_layer_input = 256;
    c.num_kv_shared_layers = 18;
    c.layer_types = Pattern(42, 6);
  } else if (name == "e2b") {
    c.hidden_size = 1536;
    c.intermediate_size = 6144;
    c.num_layers = 35;
    c.num_heads = 8;
    c.num_kv_heads = 1;
    c.num_global_kv_heads = 1;
    c.sliding_window = 512;
    c.max_position_embeddings = 131072;
    c.hidden_size_per_layer_input = 256;
    c.num_kv_shared_layers = 20;
    c.use_double_wide_mlp = true;
    c.layer_types = Pattern(35, 5);
  } else if (name == "gemma3-270m") {
    c = Gemma3Base(18, 640, 2048);
  } else if (name == "gemma3-1b") {
    c = Gemma3Base(26, 1152, 6912);
  } else {
    std::string names;
    for (const auto& n : PresetNames()) names += (names.empty() ? "" : ", ") + n;
    return Result<ModelConfig>::Error(StrCat("unknown preset '", name, "'; choose one of ", names));
  }
  GK_RETURN_IF_ERROR(ValidateModelConfig(c));
  return c;
}

Result<ModelConfig> PresetConfig(const std::string& name, int num_layers) {
  GK_ASSIGN_OR_RETURN(ModelConfig c, PresetConfig(name));
  if (num_layers <= 0 || num_layers == c.num_layers) return c;
  if (num_layers > c.num_layers) {
    return Status::Error(StrCat("--num-layers ", num_layers, ": the preset has ", c.num_layers));
  }
  c.num_kv_shared_layers = int(int64_t(c.num_kv_shared_layers) * num_layers / c.num_layers);
  c.num_layers = num_layers;
  c.layer_types.resize(size_t(num_layers));
  if (!c.layer_head_dim.empty()) c.layer_head_dim.resize(size_t(num_layers));
  if (!c.layer_kv_heads.empty()) c.layer_kv_heads.resize(size_t(num_layers));
  GK_RETURN_IF_ERROR(ValidateModelConfig(c).Wrap(StrCat("--num-layers ", num_layers)));
  return c;
}

}  // namespace gk
