#include "model/train/lora.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <regex>

#include "formats/safetensors.h"
#include "model/lora_source.h"
#include "tensor/dtype.h"
#include "util/atomic_file.h"
#include "util/guarded_parse.h"

namespace gk {

const char* LoraTargetModule(LoraTarget t) {
  switch (t) {
    case LoraTarget::kQ: return "self_attn.q_proj";
    case LoraTarget::kK: return "self_attn.k_proj";
    case LoraTarget::kV: return "self_attn.v_proj";
    case LoraTarget::kO: return "self_attn.o_proj";
    case LoraTarget::kGate: return "mlp.gate_proj";
    case LoraTarget::kUp: return "mlp.up_proj";
    case LoraTarget::kDown: return "mlp.down_proj";
  }
  return "";
}

namespace {

// (in, out) of a projection, or (0, 0) when the layer has none: v_proj on K=V layers, k_proj
// and v_proj on KV-shared layers (they read another layer's K/V; transformers builds no such
// modules there, so PEFT adapts none).
std::pair<int64_t, int64_t> ProjectionShape(const ModelConfig& c, int l, LoraTarget t) {
  const int64_t D = c.hidden_size, N = c.num_heads, H = c.HeadDim(l), K = c.KvHeads(l), F = c.MlpWidth(l);
  const std::pair<int64_t, int64_t> none{0, 0};
  switch (t) {
    case LoraTarget::kQ: return {D, N * H};
    case LoraTarget::kK: return c.IsKvShared(l) ? none : std::pair<int64_t, int64_t>{D, K * H};
    case LoraTarget::kV: return c.KEqV(l) || c.IsKvShared(l) ? none : std::pair<int64_t, int64_t>{D, K * H};
    case LoraTarget::kO: return {N * H, D};
    case LoraTarget::kGate:
    case LoraTarget::kUp: return {D, F};
    case LoraTarget::kDown: return {F, D};
  }
  return {0, 0};
}

std::string ShapeString(const std::vector<int64_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) out += StrCat(i ? ", " : "", s[i]);
  return out + ")";
}

bool Matches(const LoraOptions& o, const std::regex* re, const std::string& name) {
  if (o.target_list.empty()) return std::regex_match(name, *re);
  for (const std::string& t : o.target_list) {
    if (name == t || (name.size() > t.size() && name.compare(name.size() - t.size(), t.size(), t) == 0 &&
                      name[name.size() - t.size() - 1] == '.')) {
      return true;
    }
  }
  return false;
}

}  // namespace

Result<LoraAdapter> LoraAdapter::Create(const ModelConfig& c, const std::string& prefix, LoraOptions options) {
  if (options.rank < 1) return Status::Error(StrCat("LoRA rank must be at least 1, got ", options.rank));
  if (!(options.alpha > 0)) return Status::Error(StrCat("LoRA alpha must be positive, got ", options.alpha));
  std::regex re;
  if (options.target_list.empty()) {
    if (options.target_regex.size() > kMaxTargetRegexBytes) {
      return Status::Error(StrCat("target_modules: the regex is ", options.target_regex.size(),
                                  " bytes, over the limit of ", kMaxTargetRegexBytes));
    }
    try {
      re = std::regex(options.target_regex, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      return Status::Error(StrCat("target_modules: invalid regex \"", options.target_regex, "\": ", e.what()));
    }
  }
  LoraAdapter a;
  a.options_ = std::move(options);
  a.scaling_ = float(a.options_.use_rslora ? a.options_.alpha / std::sqrt(double(a.options_.rank))
                                           : a.options_.alpha / double(a.options_.rank));
  a.index_.assign(size_t(c.num_layers) * kNumLoraTargets, -1);
  const int64_t r = a.options_.rank;
  for (int l = 0; l < c.num_layers; ++l) {
    for (int t = 0; t < kNumLoraTargets; ++t) {
      const auto [in, out] = ProjectionShape(c, l, LoraTarget(t));
      if (in == 0) continue;
      LoraModule m;
      m.name = StrCat(prefix, "layers.", l, ".", LoraTargetModule(LoraTarget(t)));
      if (!Matches(a.options_, &re, m.name)) continue;
      m.layer = l;
      m.target = LoraTarget(t);
      m.in = in;
      m.out = out;
      m.a.assign(size_t(r * in), 0.f);
      m.b.assign(size_t(out * r), 0.f);
      a.index_[size_t(l) * kNumLoraTargets + size_t(t)] = int(a.modules_.size());
      a.modules_.push_back(std::move(m));
    }
  }
  if (a.modules_.empty()) {
    return Status::Error(StrCat("target_modules matches no projection of the model (module names look like ",
                                prefix, "layers.0.self_attn.q_proj)"));
  }
  return a;
}

void LoraAdapter::InitPeft(uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (LoraModule& m : modules_) {
    const double bound = 1.0 / std::sqrt(double(m.in));
    // Uniform from the top 53 bits: mt19937_64's output is fixed by the standard, the
    // library's distributions are not.
    for (float& v : m.a) v = float((double(rng() >> 11) * 0x1.0p-53 * 2.0 - 1.0) * bound);
    std::fill(m.b.begin(), m.b.end(), 0.f);
  }
}

LoraModule* LoraAdapter::Find(int layer, LoraTarget t) {
  const size_t i = size_t(layer) * kNumLoraTargets + size_t(t);
  return i < index_.size() && index_[i] >= 0 ? &modules_[size_t(index_[i])] : nullptr;
}
const LoraModule* LoraAdapter::Find(int layer, LoraTarget t) const {
  return const_cast<LoraAdapter*>(this)->Find(layer, t);
}

int64_t LoraAdapter::ParameterCount() const {
  int64_t n = 0;
  for (const LoraModule& m : modules_) n += int64_t(m.a.size() + m.b.size());
  return n;
}

nlohmann::json LoraAdapter::PeftConfigJson(const std::string& base_model) const {
  nlohmann::json j = {
      {"peft_type", "LORA"},
      {"task_type", "CAUSAL_LM"},
      {"base_model_name_or_path", base_model},
      {"revision", nullptr},
      {"inference_mode", true},
      {"r", options_.rank},
      {"lora_alpha", options_.alpha},
      {"lora_dropout", options_.dropout},
      {"bias", "none"},
      {"fan_in_fan_out", false},
      {"use_rslora", options_.use_rslora},
      {"use_dora", false},
      {"modules_to_save", nullptr},
      {"init_lora_weights", true},
      {"layers_to_transform", nullptr},
      {"layers_pattern", nullptr},
      {"rank_pattern", nlohmann::json::object()},
      {"alpha_pattern", nlohmann::json::object()},
      {"exclude_modules", nullptr},
      {"lora_bias", false},
  };
  if (options_.target_list.empty()) j["target_modules"] = options_.target_regex;
  else j["target_modules"] = options_.target_list;
  return j;
}

Result<LoraAdapter> LoraAdapter::FromSource(const LoraSource& source, const ModelConfig& c, const std::string& prefix) {
  const std::vector<std::string> names = source.Modules();
  if (names.empty()) return Status::Error(StrCat(source.Describe(), ": no LoRA modules"));
  GK_ASSIGN_OR_RETURN(LoraFactors first, source.Factors(names.front()));
  // Create allocates rank x (in + out) floats per module before the factors are checked: the
  // rank is bounded first, as LoadPeft bounds "r".
  const int64_t max_rank = std::max<int64_t>({c.hidden_size, int64_t(c.num_heads) * c.MaxHeadDim(),
                                              2 * int64_t(c.intermediate_size)});
  if (first.rank < 1 || first.rank > max_rank) {
    return Status::Error(StrCat(source.Describe(), ": rank ", first.rank, " is not in [1, ", max_rank, "] for this model"));
  }
  LoraOptions o;
  o.rank = int(first.rank);
  o.alpha = double(source.scaling()) * double(first.rank);
  o.target_list = names;
  GK_ASSIGN_OR_RETURN(LoraAdapter a, Create(c, prefix, o));
  std::map<std::string, LoraModule*> by_name;
  for (LoraModule& m : a.modules_) by_name[m.name] = &m;
  for (const std::string& name : names) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      return Status::Error(StrCat(source.Describe(), ": module ", name, " is not a projection of this model"));
    }
    LoraModule& m = *it->second;
    GK_ASSIGN_OR_RETURN(LoraFactors f, source.Factors(name));
    if (f.rank != o.rank || f.in != m.in || f.out != m.out || int64_t(f.a.size()) != f.rank * f.in ||
        int64_t(f.b.size()) != f.out * f.rank) {
      return Status::Error(StrCat(source.Describe(), ": ", name, " has factors (", f.rank, ", ", f.in, ") and (", f.out,
                                  ", ", f.rank, "), expected (", o.rank, ", ", m.in, ") and (", m.out, ", ", o.rank, ")"));
    }
    m.a = std::move(f.a);
    m.b = std::move(f.b);
  }
  // Create matched target_list as suffixes too: keep only the modules the source has.
  std::vector<LoraModule> kept;
  for (LoraModule& m : a.modules_) {
    if (std::find(names.begin(), names.end(), m.name) != names.end()) kept.push_back(std::move(m));
  }
  a.modules_ = std::move(kept);
  a.index_.assign(a.index_.size(), -1);
  for (size_t i = 0; i < a.modules_.size(); ++i) {
    a.index_[size_t(a.modules_[i].layer) * kNumLoraTargets + size_t(a.modules_[i].target)] = int(i);
  }
  a.scaling_ = source.scaling();
  return a;
}

Status LoraAdapter::SavePeft(const std::string& dir, const std::string& base_model) const {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::Error(StrCat(dir, ": cannot create directory: ", ec.message()));
  std::vector<TensorSpec> specs;
  auto add = [&](const std::string& key, const std::vector<float>& v, std::vector<int64_t> shape) {
    specs.push_back(TensorSpec{key, DType::kF32, std::move(shape), [&v](uint8_t* dst, size_t n) {
                                 std::memcpy(dst, v.data(), n);
                                 return Status::Ok();
                               }});
  };
  for (const LoraModule& m : modules_) {
    add(KeyA(m), m.a, {options_.rank, m.in});
    add(KeyB(m), m.b, {m.out, options_.rank});
  }
  GK_RETURN_IF_ERROR(WriteSafetensors(dir + "/adapter_model.safetensors", specs, {{"format", "pt"}}));
  return WriteFileAtomic(dir + "/adapter_config.json", PeftConfigJson(base_model).dump(2) + "\n");
}

// The adapter is outside input: whatever parsing it throws is an error (util/guarded_parse.h).
Result<LoraAdapter> LoraAdapter::LoadPeft(const std::string& dir, const ModelConfig& c, const std::string& prefix) {
  return GuardedParse(dir, [&] { return LoadPeftUnguarded(dir, c, prefix); });
}

Result<LoraAdapter> LoraAdapter::LoadPeftUnguarded(const std::string& dir, const ModelConfig& c,
                                                   const std::string& prefix) {
  const std::string config_path = dir + "/adapter_config.json";
  GK_ASSIGN_OR_RETURN(std::string text, ReadFile(config_path));
  GK_ASSIGN_OR_RETURN(nlohmann::json j, ParseJson(text, config_path));
  if (!j.is_object()) return Status::Error(StrCat(config_path, ": not a JSON object"));
  if (j.contains("peft_type") && j["peft_type"] != "LORA") {
    return Status::Error(StrCat(dir, "/adapter_config.json: peft_type ", j["peft_type"].dump(), " is not LORA"));
  }
  if (!j.contains("r") || !j["r"].is_number_integer() || !j.contains("lora_alpha") || !j["lora_alpha"].is_number()) {
    return Status::Error(StrCat(dir, "/adapter_config.json: needs integer \"r\" and number \"lora_alpha\""));
  }
  // r allocates rank x (in + out) floats per module before the tensors are read: bounded by the
  // model's widest projection, beyond which a rank means nothing.
  const int64_t max_rank = std::max<int64_t>({c.hidden_size, int64_t(c.num_heads) * c.MaxHeadDim(),
                                              2 * int64_t(c.intermediate_size)});
  if (j["r"].get<int64_t>() < 1 || j["r"].get<int64_t>() > max_rank) {
    return Status::Error(StrCat(config_path, ": \"r\" is ", j["r"].dump(), "; it must be in [1, ", max_rank,
                                "] for this model"));
  }
  if (j.contains("use_dora") && j["use_dora"] == true) {
    return Status::Error(StrCat(dir, ": DoRA adapters are not supported"));
  }
  if (j.contains("rank_pattern") && j["rank_pattern"].is_object() && !j["rank_pattern"].empty()) {
    return Status::Error(StrCat(dir, ": rank_pattern (per-module ranks) is not supported"));
  }
  if (j.contains("alpha_pattern") && j["alpha_pattern"].is_object() && !j["alpha_pattern"].empty()) {
    return Status::Error(StrCat(dir, ": alpha_pattern (per-module alphas) is not supported"));
  }
  LoraOptions o;
  o.rank = j["r"].get<int>();
  o.alpha = j["lora_alpha"].get<double>();
  o.use_rslora = j.contains("use_rslora") && j["use_rslora"] == true;
  o.dropout = j.contains("lora_dropout") && j["lora_dropout"].is_number() ? j["lora_dropout"].get<double>() : 0.0;
  // Which modules exist is decided by the tensors in the file, not by target_modules: keep
  // every projection, then drop those without tensors.
  o.target_regex = ".*";
  GK_ASSIGN_OR_RETURN(LoraAdapter a, Create(c, prefix, o));
  if (j.contains("target_modules")) {
    if (j["target_modules"].is_string()) a.options_.target_regex = j["target_modules"].get<std::string>();
    else if (j["target_modules"].is_array()) {
      for (const auto& t : j["target_modules"]) {
        if (t.is_string()) a.options_.target_list.push_back(t.get<std::string>());
      }
    }
  }
  const std::string path = dir + "/adapter_model.safetensors";
  GK_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(path));
  std::map<std::string, std::pair<int, bool>> keys;  // key -> (module index, is A)
  for (size_t i = 0; i < a.modules_.size(); ++i) {
    keys[KeyA(a.modules_[i])] = {int(i), true};
    keys[KeyB(a.modules_[i])] = {int(i), false};
  }
  std::vector<char> seen_a(a.modules_.size(), 0), seen_b(a.modules_.size(), 0);
  for (const TensorInfo& t : file->tensors()) {
    auto it = keys.find(t.name);
    if (it == keys.end()) {
      std::smatch sm;
      static const std::regex kv_key(R"(.*\.layers\.(\d+)\.self_attn\.([kv])_proj\.lora_[AB]\.weight)");
      std::string why;
      // std::regex matches recursively, a frame per character: only names of a sane length.
      if (t.name.size() < 1024 && std::regex_match(t.name, sm, kv_key)) {
        const int l = sm[1].length() < 7 ? std::stoi(sm[1].str()) : -1;
        if (l >= 0 && l < c.num_layers && c.IsKvShared(l)) {
          why = StrCat(" (layer ", l, " is KV-shared: it reads layer ", c.KvSourceLayer(l), "'s K/V and has no ",
                       sm[2].str(), "_proj)");
        } else if (l >= 0 && l < c.num_layers && sm[2] == "v" && c.KEqV(l)) {
          why = StrCat(" (layer ", l, " is a K=V layer: it has no v_proj)");
        }
      }
      return Status::Error(StrCat(path, ": tensor ", t.name, " is not a LoRA factor of a projection of this model", why));
    }
    LoraModule& m = a.modules_[size_t(it->second.first)];
    const bool is_a = it->second.second;
    const std::vector<int64_t> want = is_a ? std::vector<int64_t>{o.rank, m.in} : std::vector<int64_t>{m.out, o.rank};
    if (t.shape != want) {
      return Status::Error(StrCat(path, ": tensor ", t.name, " has shape ", ShapeString(t.shape), ", expected ",
                                  ShapeString(want)));
    }
    if (t.dtype != DType::kF32 && t.dtype != DType::kBF16 && t.dtype != DType::kF16) {
      return Status::Error(StrCat(path, ": tensor ", t.name, " has dtype ", DTypeName(t.dtype), " (want F32/BF16/F16)"));
    }
    std::vector<uint8_t> raw(t.nbytes);
    GK_RETURN_IF_ERROR(file->ReadInto(t, raw.data()));
    WidenToF32(t.dtype, raw.data(), t.numel(), (is_a ? m.a : m.b).data());
    (is_a ? seen_a : seen_b)[size_t(it->second.first)] = 1;
  }
  // Keep the modules that have both factors; one factor alone is a broken file.
  LoraAdapter out;
  out.options_ = a.options_;
  out.scaling_ = a.scaling_;
  out.index_.assign(a.index_.size(), -1);
  for (size_t i = 0; i < a.modules_.size(); ++i) {
    if (seen_a[i] != seen_b[i]) {
      return Status::Error(StrCat(path, ": ", a.modules_[i].name, " has only its lora_", seen_a[i] ? "A" : "B", " factor"));
    }
    if (!seen_a[i]) continue;
    LoraModule& m = a.modules_[i];
    out.index_[size_t(m.layer) * kNumLoraTargets + size_t(m.target)] = int(out.modules_.size());
    out.modules_.push_back(std::move(m));
  }
  if (out.modules_.empty()) return Status::Error(StrCat(path, ": no LoRA factors"));
  return out;
}

}  // namespace gk
