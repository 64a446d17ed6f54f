#include "model/config.h"

#include <cmath>
#include <filesystem>
#include <limits>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "util/atomic_file.h"
#include "util/guarded_parse.h"

namespace gk {
namespace {

using json = nlohmann::json;

// A JSON value as T when it is one: integers must fit (16.0 counts as 16; 1e300 or 3.5 as an
// int is refused rather than cast, which would be undefined behaviour).
template <class T>
bool Convert(const json& v, T* out) {
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) return false;
    *out = v.get<bool>();
  } else if constexpr (std::is_integral_v<T>) {
    static_assert(std::is_signed_v<T>);
    constexpr int64_t lo = std::numeric_limits<T>::min(), hi = std::numeric_limits<T>::max();
    if (v.is_number_unsigned()) {
      if (v.get<uint64_t>() > uint64_t(hi)) return false;
      *out = T(v.get<uint64_t>());
    } else if (v.is_number_integer()) {
      if (v.get<int64_t>() < lo || v.get<int64_t>() > hi) return false;
      *out = T(v.get<int64_t>());
    } else if (v.is_number_float()) {
      const double d = v.get<double>();
      // -double(lo) is 2^(bits-1), exactly representable, unlike double(hi) for int64_t.
      if (!(d == std::floor(d) && d >= double(lo) && d < -double(lo))) return false;
      *out = T(d);
    } else {
      return false;
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!v.is_number()) return false;
    *out = T(v.get<double>());
  } else {
    if (!v.is_string()) return false;
    *out = v.get<std::string>();
  }
  return true;
}

// Reads an optional field of the right type; error when present with the wrong type.
template <class T>
Status Get(const json& j, const char* key, T* out, bool required) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (required) return Status::Error(StrCat("config.json: missing required field '", key, "'"));
    return Status::Ok();
  }
  if (!Convert(*it, out)) {
    return Status::Error(StrCat("config.json: field '", key, "' has the wrong type or is out of range (",
                                it->dump(), ")"));
  }
  return Status::Ok();
}

Status ParseLayerTypes(const json& t, ModelConfig* c) {
  if (t.contains("layer_types") && t["layer_types"].is_array()) {
    for (const auto& v : t["layer_types"]) {
      const std::string s = v.is_string() ? v.get<std::string>() : "";
      if (s == "sliding_attention") c->layer_types.push_back(LayerType::kSliding);
      else if (s == "full_attention") c->layer_types.push_back(LayerType::kFull);
      else return Status::Error(StrCat("config.json: unknown layer type ", v.dump(), " in layer_types"));
    }
    if (int(c->layer_types.size()) != c->num_layers) {
      return Status::Error(StrCat("config.json: layer_types has ", c->layer_types.size(),
                                  " entries but num_hidden_layers is ", c->num_layers));
    }
    return Status::Ok();
  }
  // Older configs give a period: every `pattern`-th layer is full.
  int pattern = 6;
  GK_RETURN_IF_ERROR(Get(t, "sliding_window_pattern", &pattern, false));
  if (pattern <= 0) return Status::Error("config.json: sliding_window_pattern must be positive");
  for (int l = 0; l < c->num_layers; ++l) {
    c->layer_types.push_back((l + 1) % pattern == 0 ? LayerType::kFull : LayerType::kSliding);
  }
  return Status::Ok();
}

Status ParseRopeEntry(const json& r, RopeParams* p) {
  GK_RETURN_IF_ERROR(Get(r, "rope_theta", &p->theta, false));
  GK_RETURN_IF_ERROR(Get(r, "partial_rotary_factor", &p->partial_rotary_factor, false));
  GK_RETURN_IF_ERROR(Get(r, "factor", &p->scaling_factor, false));
  std::string type = "default";
  GK_RETURN_IF_ERROR(Get(r, "rope_type", &type, false));
  if (type != "default" && type != "proportional" && type != "linear") {
    return Status::Error(StrCat("config.json: rope_type '", type, "' is not supported (default, proportional, linear)"));
  }
  return Status::Ok();
}

Status ParseRope(const json& t, ModelConfig* c) {
  if (t.contains("rope_parameters") && t["rope_parameters"].is_object()) {
    const json& rp = t["rope_parameters"];
    if (rp.contains("full_attention")) {  // keyed by layer type
      GK_RETURN_IF_ERROR(ParseRopeEntry(rp["full_attention"], &c->rope_full));
      if (rp.contains("sliding_attention")) GK_RETURN_IF_ERROR(ParseRopeEntry(rp["sliding_attention"], &c->rope_sliding));
      return Status::Ok();
    }
    GK_RETURN_IF_ERROR(ParseRopeEntry(rp, &c->rope_full));
  }
  // Gemma 3 style keys.
  GK_RETURN_IF_ERROR(Get(t, "rope_theta", &c->rope_full.theta, false));
  GK_RETURN_IF_ERROR(Get(t, "rope_local_base_freq", &c->rope_sliding.theta, false));
  if (t.contains("rope_scaling") && t["rope_scaling"].is_object()) {
    GK_RETURN_IF_ERROR(ParseRopeEntry(t["rope_scaling"], &c->rope_full));
    GK_RETURN_IF_ERROR(Get(t, "rope_theta", &c->rope_full.theta, false));
  }
  return Status::Ok();
}

// transformers >= 5.15 writes the full-attention layers' shape as per_layer_config, keyed by
// layer index ({"5": {"head_dim": 512, "num_key_value_heads": 4}}) instead of global_head_dim /
// num_global_key_value_heads; a layer without an entry then has head_dim and
// num_key_value_heads, whatever its type. Any layer may carry an entry. The values are folded
// back into the released style: each type's shape from its first layer, per-layer overrides
// (layer_head_dim, layer_kv_heads) only where a layer differs from its type, so both styles
// of one checkpoint parse to the same ModelConfig.
Status ParsePerLayerConfig(const json& t, ModelConfig* c) {
  auto it = t.find("per_layer_config");
  if (it == t.end() || it->is_null()) return Status::Ok();
  if (!it->is_object()) return Status::Error(StrCat("config.json: per_layer_config must be an object keyed by layer index, got ", it->dump()));
  const int L = c->num_layers;
  std::vector<int> H(size_t(L), c->head_dim), K(size_t(L), c->num_kv_heads);
  for (const auto& [key, overrides] : it->items()) {
    const bool digits = !key.empty() && key.size() <= 9 && key.find_first_not_of("0123456789") == std::string::npos;
    const int l = digits ? std::stoi(key) : -1;
    if (l < 0 || l >= L) {
      return Status::Error(StrCat("config.json: per_layer_config key '", key, "' is not a layer index (0..", L - 1, ")"));
    }
    if (!overrides.is_object()) {
      return Status::Error(StrCat("config.json: per_layer_config layer ", l, " must be an object, got ", overrides.dump()));
    }
    for (const auto& [field, value] : overrides.items()) {
      int* slot = field == "head_dim" ? &H[size_t(l)] : field == "num_key_value_heads" ? &K[size_t(l)] : nullptr;
      if (slot == nullptr) {
        // The global value repeated (a full dump of every layer) overrides nothing.
        if (t.contains(field) && t[field] == value) continue;
        return Status::Error(StrCat("config.json: per_layer_config layer ", l, ": override '", field,
                                    "' is not supported (gemmakit applies head_dim and num_key_value_heads per layer)"));
      }
      if (!value.is_number_integer() || value.get<int64_t>() <= 0 || value.get<int64_t>() > (1 << 20)) {
        return Status::Error(StrCat("config.json: per_layer_config layer ", l, ": ", field,
                                    " must be a positive integer, got ", value.dump()));
      }
      *slot = value.get<int>();
    }
  }
  for (int l = 0; l < L; ++l) {
    if (!c->IsFull(l)) continue;
    c->global_head_dim = H[size_t(l)];
    if (c->KEqV(l)) c->num_global_kv_heads = K[size_t(l)];
    break;
  }
  c->layer_head_dim.assign(size_t(L), 0);
  c->layer_kv_heads.assign(size_t(L), 0);
  bool any_head = false, any_kv = false;
  for (int l = 0; l < L; ++l) {
    if (H[size_t(l)] != c->HeadDim(l)) c->layer_head_dim[size_t(l)] = H[size_t(l)], any_head = true;
    if (K[size_t(l)] != c->KvHeads(l)) c->layer_kv_heads[size_t(l)] = K[size_t(l)], any_kv = true;
  }
  if (!any_head) c->layer_head_dim.clear();
  if (!any_kv) c->layer_kv_heads.clear();
  return Status::Ok();
}

// Fields of transformers' configs whose non-default values change the function the decoder
// computes in ways gemmakit does not implement: refused rather than silently ignored.
Status CheckUnsupportedFields(const json& t, Arch arch) {
  auto set = [&](const char* key) { return t.contains(key) && !t[key].is_null() && t[key] != false; };
  if (set("attention_bias")) return Status::Error("config.json: attention_bias true is not supported (Gemma has no biases)");
  if (arch == Arch::kGemma3 && set("attn_logit_softcapping")) {
    return Status::Error(StrCat("config.json: attn_logit_softcapping ", t["attn_logit_softcapping"].dump(),
                                " is not supported (Gemma 3 has none)"));
  }
  if (t.contains("use_bidirectional_attention") && t["use_bidirectional_attention"] == "all") {
    return Status::Error("config.json: use_bidirectional_attention \"all\" is not supported (gemmakit runs causal decoders)");
  }
  return Status::Ok();
}

void AddEos(const json& j, std::vector<int>* ids) {
  auto it = j.find("eos_token_id");
  if (it == j.end()) return;
  auto add = [&](const json& v) {
    if (v.is_number_integer() && std::find(ids->begin(), ids->end(), v.get<int>()) == ids->end()) {
      ids->push_back(v.get<int>());
    }
  };
  if (it->is_array()) {
    for (const auto& v : *it) add(v);
  } else {
    add(*it);
  }
}

Result<Arch> DetectArch(const json& top, const json& text) {
  std::string mt;
  if (text.contains("model_type") && text["model_type"].is_string()) mt = text["model_type"];
  else if (top.contains("model_type") && top["model_type"].is_string()) mt = top["model_type"];
  if (mt == "gemma4_text" || mt == "gemma4") return Arch::kGemma4;
  if (mt == "gemma3_text" || mt == "gemma3") return Arch::kGemma3;
  std::string archs = top.contains("architectures") ? top["architectures"].dump() : "none";
  return Result<Arch>::Error(StrCat("config.json: unknown architecture (model_type '", mt,
                                    "', architectures ", archs,
                                    "); gemmakit runs gemma4, gemma4_text, gemma3 and gemma3_text"));
}

// Shapes the released fields cannot say, as transformers' per_layer_config. transformers then
// ignores global_head_dim / num_global_key_value_heads, so every full layer gets an entry too.
void AddPerLayerConfig(const ModelConfig& c, json* t) {
  if (c.UniformPerLayerType()) return;
  json per_layer = json::object();
  for (int l = 0; l < c.num_layers; ++l) {
    const bool head = !c.layer_head_dim.empty() && c.layer_head_dim[size_t(l)] > 0;
    const bool kv = !c.layer_kv_heads.empty() && c.layer_kv_heads[size_t(l)] > 0;
    if (!head && !kv && !c.IsFull(l)) continue;
    json o = {{"head_dim", c.HeadDim(l)}};
    if (c.KvHeads(l) != c.num_kv_heads) o["num_key_value_heads"] = c.KvHeads(l);
    per_layer[std::to_string(l)] = o;
  }
  (*t)["per_layer_config"] = per_layer;
}

}  // namespace

int ModelConfig::KvSourceLayer(int l) const {
  const int first_shared = num_layers - num_kv_shared_layers;
  if (num_kv_shared_layers <= 0 || l < first_shared) return l;
  for (int s = first_shared - 1; s >= 0; --s) {
    if (layer_types[s] == layer_types[l]) return s;
  }
  return l;
}

bool ModelConfig::IsKvSource(int l) const {
  for (int s = num_layers - num_kv_shared_layers; s < num_layers; ++s) {
    if (s > l && KvSourceLayer(s) == l) return true;
  }
  return false;
}

int ModelConfig::MlpWidth(int l) const {
  return (use_double_wide_mlp && IsKvShared(l)) ? 2 * intermediate_size : intermediate_size;
}

int ModelConfig::MaxHeadDim() const {
  int h = std::max(head_dim, global_head_dim);
  for (int l = 0; l < num_layers; ++l) h = std::max(h, HeadDim(l));
  return h;
}

int ModelConfig::MaxKvHeads() const {
  int k = std::max(num_kv_heads, num_global_kv_heads);
  for (int l = 0; l < num_layers; ++l) k = std::max(k, KvHeads(l));
  return k;
}

int64_t ModelConfig::ParameterCount() const {
  const int64_t D = hidden_size;
  int64_t n = int64_t(vocab_size) * D + D;  // embedding + final norm
  if (hidden_size_per_layer_input > 0) {
    const int64_t LP = int64_t(num_layers) * hidden_size_per_layer_input;
    n += int64_t(vocab_size_per_layer_input) * LP + LP * D + hidden_size_per_layer_input;
  }
  for (int l = 0; l < num_layers; ++l) {
    const int64_t H = HeadDim(l), K = KvHeads(l), F = MlpWidth(l);
    n += 4 * D + 2 * H + (arch == Arch::kGemma4 ? 1 : 0);  // four norms, q/k norms, layer scalar
    n += int64_t(num_heads) * H * D * 2;       // q and o
    n += K * H * D * (KEqV(l) ? 1 : 2);        // k (and v)
    n += 3 * D * F;                            // gate, up, down
    if (hidden_size_per_layer_input > 0) n += 2 * D * hidden_size_per_layer_input + D;
    if (enable_moe_block) {
      n += int64_t(num_experts) * D + D + num_experts;  // router proj, scale, per-expert scale
      n += int64_t(num_experts) * 3 * D * moe_intermediate_size + 3 * D;
    }
  }
  return n;
}

namespace {

Result<ModelConfig> ParseModelConfigUnguarded(const json& top) {
  if (!top.is_object()) return Result<ModelConfig>::Error("config.json: not a JSON object");
  const json& t = (top.contains("text_config") && top["text_config"].is_object()) ? top["text_config"] : top;
  ModelConfig c;
  GK_ASSIGN_OR_RETURN(c.arch, DetectArch(top, t));
  GK_RETURN_IF_ERROR(Get(t, "vocab_size", &c.vocab_size, true));
  GK_RETURN_IF_ERROR(Get(t, "hidden_size", &c.hidden_size, true));
  GK_RETURN_IF_ERROR(Get(t, "intermediate_size", &c.intermediate_size, true));
  GK_RETURN_IF_ERROR(Get(t, "num_hidden_layers", &c.num_layers, true));
  GK_RETURN_IF_ERROR(Get(t, "num_attention_heads", &c.num_heads, true));
  GK_RETURN_IF_ERROR(Get(t, "num_key_value_heads", &c.num_kv_heads, true));
  GK_RETURN_IF_ERROR(Get(t, "head_dim", &c.head_dim, true));
  GK_RETURN_IF_ERROR(Get(t, "sliding_window", &c.sliding_window, true));
  GK_RETURN_IF_ERROR(Get(t, "rms_norm_eps", &c.rms_norm_eps, false));
  GK_RETURN_IF_ERROR(Get(t, "max_position_embeddings", &c.max_position_embeddings, false));
  GK_RETURN_IF_ERROR(Get(t, "final_logit_softcapping", &c.final_logit_softcap, false));
  GK_RETURN_IF_ERROR(Get(t, "tie_word_embeddings", &c.tie_word_embeddings, false));
  GK_RETURN_IF_ERROR(Get(top, "tie_word_embeddings", &c.tie_word_embeddings, false));
  GK_RETURN_IF_ERROR(Get(t, "bos_token_id", &c.bos_token_id, false));
  GK_RETURN_IF_ERROR(Get(t, "pad_token_id", &c.pad_token_id, false));
  std::string act = "gelu_pytorch_tanh";
  GK_RETURN_IF_ERROR(Get(t, "hidden_activation", &act, false));
  if (act != "gelu_pytorch_tanh") {
    return Result<ModelConfig>::Error(StrCat("config.json: hidden_activation '", act, "' is not supported (gelu_pytorch_tanh)"));
  }
  if (c.num_layers > kMaxLayers) {
    return Result<ModelConfig>::Error(StrCat("config.json: num_hidden_layers ", c.num_layers, " is over the limit of ",
                                             kMaxLayers));
  }
  GK_RETURN_IF_ERROR(ParseLayerTypes(t, &c));
  c.rope_sliding.theta = 10000.f;
  c.rope_full.theta = 1000000.f;
  GK_RETURN_IF_ERROR(ParseRope(t, &c));
  AddEos(t, &c.eos_token_ids);
  AddEos(top, &c.eos_token_ids);
  if (!c.eos_token_ids.empty()) c.eos_token_id = c.eos_token_ids.front();
  else c.eos_token_ids.push_back(c.eos_token_id);
  // transformers 5.x writes `dtype` (at the top level and in text_config), 4.x `torch_dtype`.
  for (const json* j : {&top, &t}) {
    GK_RETURN_IF_ERROR(Get(*j, "dtype", &c.torch_dtype, false));
    GK_RETURN_IF_ERROR(Get(*j, "torch_dtype", &c.torch_dtype, false));
  }
  GK_RETURN_IF_ERROR(CheckUnsupportedFields(t, c.arch));

  if (c.arch == Arch::kGemma4) {
    c.global_head_dim = 512;
    GK_RETURN_IF_ERROR(Get(t, "global_head_dim", &c.global_head_dim, false));
    c.num_global_kv_heads = c.num_kv_heads;
    GK_RETURN_IF_ERROR(Get(t, "num_global_key_value_heads", &c.num_global_kv_heads, false));
    GK_RETURN_IF_ERROR(Get(t, "attention_k_eq_v", &c.attention_k_eq_v, false));
    GK_RETURN_IF_ERROR(Get(t, "hidden_size_per_layer_input", &c.hidden_size_per_layer_input, false));
    c.vocab_size_per_layer_input = c.vocab_size;
    GK_RETURN_IF_ERROR(Get(t, "vocab_size_per_layer_input", &c.vocab_size_per_layer_input, false));
    GK_RETURN_IF_ERROR(Get(t, "num_kv_shared_layers", &c.num_kv_shared_layers, false));
    GK_RETURN_IF_ERROR(Get(t, "use_double_wide_mlp", &c.use_double_wide_mlp, false));
    GK_RETURN_IF_ERROR(Get(t, "enable_moe_block", &c.enable_moe_block, false));
    GK_RETURN_IF_ERROR(Get(t, "num_experts", &c.num_experts, false));
    GK_RETURN_IF_ERROR(Get(t, "top_k_experts", &c.top_k_experts, false));
    GK_RETURN_IF_ERROR(Get(t, "moe_intermediate_size", &c.moe_intermediate_size, false));
    // As transformers' Gemma4TextConfig does: the last layer is always full attention.
    if (!c.layer_types.empty()) c.layer_types.back() = LayerType::kFull;
  } else {
    c.global_head_dim = c.head_dim;
    c.num_global_kv_heads = c.num_kv_heads;
    c.query_pre_attn_scalar = float(c.head_dim);
    GK_RETURN_IF_ERROR(Get(t, "query_pre_attn_scalar", &c.query_pre_attn_scalar, false));
  }
  GK_RETURN_IF_ERROR(ParsePerLayerConfig(t, &c));
  GK_RETURN_IF_ERROR(ValidateModelConfig(c));
  return c;
}

}  // namespace

// config.json is outside input: nothing it holds may end in an exception (util/guarded_parse.h).
Result<ModelConfig> ParseModelConfig(const json& top) {
  return GuardedParse("config.json", [&] { return ParseModelConfigUnguarded(top); });
}

Status ValidateModelConfig(const ModelConfig& c) {
  // Bounded too, so that sizes computed from them (products, per-layer tables) cannot overflow.
  auto positive = [](const char* name, int v) -> Status {
    if (v <= 0) return Status::Error(StrCat("config.json: ", name, " must be positive, got ", v));
    if (v > kMaxDimension) {
      return Status::Error(StrCat("config.json: ", name, " ", v, " is over the limit of ", kMaxDimension));
    }
    return Status::Ok();
  };
  GK_RETURN_IF_ERROR(positive("vocab_size", c.vocab_size));
  GK_RETURN_IF_ERROR(positive("hidden_size", c.hidden_size));
  GK_RETURN_IF_ERROR(positive("intermediate_size", c.intermediate_size));
  GK_RETURN_IF_ERROR(positive("num_hidden_layers", c.num_layers));
  GK_RETURN_IF_ERROR(positive("num_attention_heads", c.num_heads));
  GK_RETURN_IF_ERROR(positive("num_key_value_heads", c.num_kv_heads));
  GK_RETURN_IF_ERROR(positive("head_dim", c.head_dim));
  GK_RETURN_IF_ERROR(positive("global_head_dim", c.global_head_dim));
  GK_RETURN_IF_ERROR(positive("num_global_key_value_heads", c.num_global_kv_heads));
  GK_RETURN_IF_ERROR(positive("sliding_window", c.sliding_window));
  if (c.num_layers > kMaxLayers) {
    return Status::Error(StrCat("config.json: num_hidden_layers ", c.num_layers, " is over the limit of ", kMaxLayers));
  }
  for (const auto& [name, v] : {std::pair<const char*, int>{"hidden_size_per_layer_input", c.hidden_size_per_layer_input},
                                {"vocab_size_per_layer_input", c.vocab_size_per_layer_input},
                                {"num_experts", c.num_experts}, {"moe_intermediate_size", c.moe_intermediate_size}}) {
    if (v < 0 || v > kMaxDimension) {
      return Status::Error(StrCat("config.json: ", name, " must be in [0, ", kMaxDimension, "], got ", v));
    }
  }
  if (int(c.layer_types.size()) != c.num_layers) {
    return Status::Error(StrCat("config.json: ", c.layer_types.size(), " layer types for ", c.num_layers, " layers"));
  }
  for (const std::vector<int>* v : {&c.layer_head_dim, &c.layer_kv_heads}) {
    if (!v->empty() && int(v->size()) != c.num_layers) {
      return Status::Error(StrCat("config.json: per-layer overrides for ", v->size(), " of ", c.num_layers, " layers"));
    }
  }
  for (int l = 0; l < c.num_layers; ++l) {
    if (c.HeadDim(l) <= 0 || c.HeadDim(l) % 2 || c.KvHeads(l) <= 0) {
      return Status::Error(StrCat("config.json: layer ", l, " has head dim ", c.HeadDim(l), " and ", c.KvHeads(l),
                                  " kv heads; head dims must be even and positive"));
    }
    const int src = c.KvSourceLayer(l);
    if (src != l && (c.HeadDim(src) != c.HeadDim(l) || c.KvHeads(src) != c.KvHeads(l))) {
      return Status::Error(StrCat("config.json: KV-shared layer ", l, " (head dim ", c.HeadDim(l), ", ", c.KvHeads(l),
                                  " kv heads) reads layer ", src, "'s cache, which has head dim ", c.HeadDim(src), " and ",
                                  c.KvHeads(src), " kv heads"));
    }
    if (c.num_heads % c.KvHeads(l) != 0) {
      return Status::Error(StrCat("config.json: layer ", l, " has ", c.num_heads, " query heads, not a multiple of ",
                                  c.KvHeads(l), " kv heads"));
    }
  }
  if (c.num_kv_shared_layers < 0 || c.num_kv_shared_layers >= c.num_layers) {
    return Status::Error(StrCat("config.json: num_kv_shared_layers ", c.num_kv_shared_layers, " out of range"));
  }
  if (c.enable_moe_block && (c.num_experts <= 0 || c.top_k_experts <= 0 || c.top_k_experts > c.num_experts ||
                             c.moe_intermediate_size <= 0)) {
    return Status::Error("config.json: enable_moe_block needs num_experts, top_k_experts <= num_experts and moe_intermediate_size");
  }
  if (!c.tie_word_embeddings) {
    return Status::Error("config.json: tie_word_embeddings false is not supported (all Gemma models tie the head)");
  }
  return Status::Ok();
}

std::string CheckpointDirOf(const std::string& dir_or_file) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(dir_or_file, ec)) return dir_or_file;
  const std::string parent = std::filesystem::path(dir_or_file).parent_path().string();
  return parent.empty() ? "." : parent;
}

Result<ModelConfig> LoadModelConfig(const std::string& dir_or_file) {
  const std::string model_dir = CheckpointDirOf(dir_or_file);
  const std::string path = (std::filesystem::path(model_dir) / "config.json").string();
  GK_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  GK_ASSIGN_OR_RETURN(json j, ParseJson(text, path));
  auto c = ParseModelConfig(j);
  if (!c.ok()) return Result<ModelConfig>::Error(StrCat(model_dir, "/", c.message()));
  // generation_config.json may list more stop ids (Gemma 4: <eos>, <turn|>, <|tool_response>);
  // unreadable, it is ignored, as before.
  auto gen = ReadFile((std::filesystem::path(model_dir) / "generation_config.json").string());
  if (gen.ok()) {
    auto g = ParseJson(*gen, "generation_config.json");
    if (g.ok() && g->is_object()) AddEos(*g, &c->eos_token_ids);
  }
  return c;
}

json ModelConfigToJson(const ModelConfig& c) {
  json t;
  auto types = json::array();
  for (LayerType lt : c.layer_types) types.push_back(lt == LayerType::kFull ? "full_attention" : "sliding_attention");
  t["vocab_size"] = c.vocab_size;
  t["hidden_size"] = c.hidden_size;
  t["intermediate_size"] = c.intermediate_size;
  t["num_hidden_layers"] = c.num_layers;
  t["num_attention_heads"] = c.num_heads;
  t["num_key_value_heads"] = c.num_kv_heads;
  t["head_dim"] = c.head_dim;
  t["hidden_activation"] = "gelu_pytorch_tanh";
  t["max_position_embeddings"] = c.max_position_embeddings;
  t["rms_norm_eps"] = c.rms_norm_eps;
  t["pad_token_id"] = c.pad_token_id;
  t["bos_token_id"] = c.bos_token_id;
  t["eos_token_id"] = c.eos_token_ids.size() > 1 ? json(c.eos_token_ids) : json(c.eos_token_id);
  t["tie_word_embeddings"] = true;
  t["attention_bias"] = false;
  t["attention_dropout"] = 0.0;
  t["sliding_window"] = c.sliding_window;
  t["layer_types"] = types;
  t["torch_dtype"] = c.torch_dtype;
  if (c.arch == Arch::kGemma3) {
    t["architectures"] = {"Gemma3ForCausalLM"};
    t["model_type"] = "gemma3_text";
    t["rope_theta"] = c.rope_full.theta;
    t["rope_local_base_freq"] = c.rope_sliding.theta;
    t["rope_scaling"] = nullptr;
    t["query_pre_attn_scalar"] = c.query_pre_attn_scalar;
    t["final_logit_softcapping"] = c.final_logit_softcap > 0 ? json(c.final_logit_softcap) : json(nullptr);
    t["attn_logit_softcapping"] = nullptr;
    AddPerLayerConfig(c, &t);
    return t;
  }
  t["architectures"] = {"Gemma4ForCausalLM"};
  t["model_type"] = "gemma4_text";
  t["global_head_dim"] = c.global_head_dim;
  t["num_global_key_value_heads"] = c.num_global_kv_heads;
  t["attention_k_eq_v"] = c.attention_k_eq_v;
  t["final_logit_softcapping"] = c.final_logit_softcap;
  t["rope_parameters"] = {
      {"full_attention", {{"rope_type", "proportional"}, {"partial_rotary_factor", c.rope_full.partial_rotary_factor},
                          {"rope_theta", c.rope_full.theta}}},
      {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", c.rope_sliding.theta}}}};
  t["hidden_size_per_layer_input"] = c.hidden_size_per_layer_input;
  t["vocab_size_per_layer_input"] = c.vocab_size_per_layer_input;
  t["num_kv_shared_layers"] = c.num_kv_shared_layers;
  t["use_double_wide_mlp"] = c.use_double_wide_mlp;
  t["enable_moe_block"] = c.enable_moe_block;
  t["num_experts"] = c.enable_moe_block ? json(c.num_experts) : json(nullptr);
  t["top_k_experts"] = c.enable_moe_block ? json(c.top_k_experts) : json(nullptr);
  t["moe_intermediate_size"] = c.enable_moe_block ? json(c.moe_intermediate_size) : json(nullptr);
  t["use_bidirectional_attention"] = nullptr;
  AddPerLayerConfig(c, &t);
  return t;
}

}  // namespace gk
