#include "tools/bridge/convert.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "formats/orbax/orbax.h"
#include "formats/safetensors.h"
#include "model/config.h"
#include "model/tunix_layout.h"
#include "model/weights.h"
#include "tensor/dtype.h"
#include "model/lora_source.h"
#include "formats/checkpoint_side_files.h"
#include "util/atomic_file.h"

namespace gk::bridge {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> SplitPath(const std::string& dotted, bool add_value) {
  std::vector<std::string> out;
  size_t b = 0;
  while (true) {
    const size_t e = dotted.find('.', b);
    out.push_back(dotted.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  if (add_value) out.push_back("value");
  return out;
}

std::vector<int> KeyTypes(const std::vector<std::string>& path) {
  std::vector<int> t;
  for (const std::string& k : path) t.push_back(!k.empty() && k.find_first_not_of("0123456789") == std::string::npos ? 1 : 2);
  return t;
}

// The prefix a config's own checkpoints use: its safetensors if there are any, else Gemma 4's
// multimodal layout (what ModelConfigToJson writes) or Gemma 3's causal-LM one.
std::string PrefixFor(const std::string& config_dir, const ModelConfig& c) {
  auto set = SafetensorsSet::Open(config_dir);
  if (set.ok()) {
    auto p = DetectWeightPrefix(*set, config_dir);
    if (p.ok()) return *p;
  }
  return c.arch == Arch::kGemma4 ? "model.language_model." : "model.";
}

// The last array an Item read, so that kv_einsum's two HF tensors read it once.
struct ArrayCache {
  const orbax::Item* item = nullptr;
  std::string name;
  std::vector<uint8_t> bytes;
  Result<const uint8_t*> Get(const orbax::ArrayInfo& a) {
    if (name != a.name) {
      bytes.resize(a.nbytes());
      name.clear();
      GK_RETURN_IF_ERROR(item->Read(a, bytes.data()));
      name = a.name;
    }
    return bytes.data();
  }
};

}  // namespace

std::string OrbaxItemDir(const std::string& p) {
  std::error_code ec;
  if (fs::is_directory(fs::path(p) / "model_params", ec)) return p + "/model_params";
  return p;
}

Result<ConvertReport> HfToTunixOrbax(const std::string& hf_dir, const std::string& root, int64_t step,
                                     ConversionProgress* progress) {
  GK_ASSIGN_OR_RETURN(ModelConfig c, LoadModelConfig(hf_dir));
  GK_ASSIGN_OR_RETURN(auto set, SafetensorsSet::Open(hf_dir));
  auto shared = std::make_shared<SafetensorsSet>(std::move(set));
  GK_ASSIGN_OR_RETURN(std::string prefix, DetectWeightPrefix(*shared, hf_dir));
  GK_ASSIGN_OR_RETURN(std::vector<TunixArray> layout, TunixBaseLayout(c, prefix));
  std::vector<orbax::ArraySpec> specs;
  ConvertReport rep;
  rep.layout = "Tunix Gemma tree";
  for (const TunixArray& a : layout) {
    std::vector<const TensorInfo*> infos;
    for (const std::string& n : a.hf) {
      const TensorInfo* t = shared->Find(n);
      if (!t) return Status::Error(StrCat(hf_dir, ": tensor ", n, " is missing (needed for ", a.path, ")"));
      if (t->shape != a.hf_shape) return Status::Error(StrCat(hf_dir, ": tensor ", n, " does not have the config's shape"));
      if (!infos.empty() && t->dtype != infos[0]->dtype) {
        return Status::Error(StrCat(hf_dir, ": k_proj and v_proj of ", a.path, " differ in dtype"));
      }
      infos.push_back(t);
    }
    orbax::ArraySpec s;
    s.path = SplitPath(a.path, true);
    s.key_types = KeyTypes(s.path);
    s.dtype = infos[0]->dtype;
    s.shape = a.shape;
    s.fill = [shared, infos, a](uint8_t* dst, size_t n) -> Status {
      std::vector<std::vector<uint8_t>> src(infos.size());
      std::vector<const uint8_t*> ptrs;
      for (size_t i = 0; i < infos.size(); ++i) {
        src[i].resize(infos[i]->nbytes);
        GK_RETURN_IF_ERROR(shared->ReadInto(*infos[i], src[i].data()));
        ptrs.push_back(src[i].data());
      }
      HfToTunix(a, ptrs, DTypeSize(infos[0]->dtype), dst);
      return Status::Ok();
    };
    ++rep.arrays;
    for (const TensorInfo* t : infos) rep.bytes += t->nbytes;
    specs.push_back(std::move(s));
  }
  if (progress) {
    progress->AddWork(rep.bytes, int64_t(specs.size()));
    for (orbax::ArraySpec& sp : specs) sp.fill = progress->Track(std::move(sp.fill));
  }
  GK_RETURN_IF_ERROR(orbax::WriteStep(root, step, {{"model_params", std::move(specs)}}));
  if (progress) progress->FileDone(StrCat(root, "/", step));
  return rep;
}

Result<ConvertReport> OrbaxToHf(const std::string& item_or_step, const std::string& out_dir,
                                const std::string& config_dir, ConversionProgress* progress) {
  std::error_code ec;
  if (fs::exists(out_dir, ec)) return Status::Error(StrCat(out_dir, " already exists; not overwriting it"));
  GK_ASSIGN_OR_RETURN(std::unique_ptr<orbax::Item> item, orbax::Item::Open(OrbaxItemDir(item_or_step)));
  std::map<std::string, const orbax::ArrayInfo*> by_key;
  for (const orbax::ArrayInfo& a : item->arrays()) by_key[TunixKey(a.path)] = &a;
  auto cache = std::make_shared<ArrayCache>();
  cache->item = item.get();
  std::vector<TensorSpec> specs;
  ConvertReport rep;
  bool gemma = false;
  ModelConfig c;
  std::vector<TunixArray> layout;
  if (!config_dir.empty()) {
    GK_ASSIGN_OR_RETURN(c, LoadModelConfig(config_dir));
    GK_ASSIGN_OR_RETURN(layout, TunixBaseLayout(c, PrefixFor(config_dir, c)));
    gemma = true;
    for (const TunixArray& a : layout) {
      auto it = by_key.find(a.path);
      if (it == by_key.end()) return Status::Error(StrCat(item->dir(), ": no array ", a.path, " (a Tunix Gemma tree with ", config_dir, "'s config has one)"));
      if (it->second->shape != a.shape) return Status::Error(StrCat(item->dir(), ": ", a.path, " does not have the config's shape"));
    }
  }
  if (gemma) {
    rep.layout = "Hugging Face Gemma";
    for (const TunixArray& a : layout) {
      const orbax::ArrayInfo* info = by_key.at(a.path);
      for (size_t i = 0; i < a.hf.size(); ++i) {
        specs.push_back({a.hf[i], info->dtype, a.hf_shape, [cache, info, a, i](uint8_t* dst, size_t n) -> Status {
                           GK_ASSIGN_OR_RETURN(const uint8_t* src, cache->Get(*info));
                           std::vector<std::vector<uint8_t>> outs(a.hf.size());
                           std::vector<uint8_t*> ptrs;
                           for (auto& o : outs) {
                             o.resize(n);
                             ptrs.push_back(o.data());
                           }
                           TunixToHf(a, src, DTypeSize(info->dtype), ptrs);
                           std::memcpy(dst, outs[i].data(), n);
                           return Status::Ok();
                         }});
        rep.bytes += uint64_t(a.hf_shape[0] * (a.hf_shape.size() > 1 ? a.hf_shape[1] : 1)) * DTypeSize(info->dtype);
      }
      ++rep.arrays;
    }
  } else {
    rep.layout = "plain dump (tree paths as tensor names)";
    for (const orbax::ArrayInfo& a : item->arrays()) {
      if (a.dtype == DType::kUnknown) return Status::Error(StrCat(item->dir(), ": ", a.name, " has dtype ", a.stored_dtype, ", which safetensors cannot hold"));
      const orbax::ArrayInfo* info = &a;
      specs.push_back({TunixKey(a.path), a.dtype, a.shape, [cache, info](uint8_t* dst, size_t n) -> Status {
                         GK_ASSIGN_OR_RETURN(const uint8_t* src, cache->Get(*info));
                         std::memcpy(dst, src, n);
                         return Status::Ok();
                       }});
      ++rep.arrays;
      rep.bytes += a.nbytes();
    }
  }
  const std::string tmp = out_dir + ".tmp-convert";
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) return Status::Error(StrCat(tmp, ": cannot create: ", ec.message()));
  std::function<void(const std::string&)> on_file;
  if (progress) {
    progress->AddWork(rep.bytes, int64_t(specs.size()));
    for (TensorSpec& sp : specs) sp.fill = progress->Track(std::move(sp.fill));
    on_file = [progress](const std::string& path) { progress->FileDone(path); };
  }
  Status s = WriteSafetensorsDir(tmp, specs, 5ull << 30, {}, on_file);
  if (s.ok() && gemma) s = CopyCheckpointSideFiles(config_dir, tmp, /*keep_index=*/false);
  if (!s.ok()) {
    fs::remove_all(tmp, ec);
    return s;
  }
  fs::rename(tmp, out_dir, ec);
  if (ec) return Status::Error(StrCat("renaming ", tmp, " to ", out_dir, ": ", ec.message()));
  return rep;
}

Result<ConvertReport> PeftToQwixOrbax(const std::string& peft_dir, const std::string& config_dir,
                                      const std::string& root, int64_t step) {
  GK_ASSIGN_OR_RETURN(ModelConfig c, LoadModelConfig(config_dir));
  GK_ASSIGN_OR_RETURN(std::unique_ptr<LoraSource> src, OpenPeftLoraSource(peft_dir));
  const std::string prefix = PrefixFor(config_dir, c);
  int64_t rank = 0;
  std::map<std::string, LoraFactors> factors;  // PEFT key -> the module's factors
  for (const std::string& m : src->Modules()) {
    GK_ASSIGN_OR_RETURN(LoraFactors f, src->Factors(m));
    rank = f.rank;
    factors[StrCat("base_model.model.", m, ".lora_A.weight")] = f;
    factors[StrCat("base_model.model.", m, ".lora_B.weight")] = std::move(f);
  }
  GK_ASSIGN_OR_RETURN(std::vector<QwixLoraArray> layout, QwixLoraLayout(c, prefix, int(rank), src->Modules()));
  std::vector<orbax::ArraySpec> specs;
  ConvertReport rep;
  rep.layout = "Qwix LoRA factors";
  auto shared = std::make_shared<std::map<std::string, LoraFactors>>(std::move(factors));
  for (const QwixLoraArray& q : layout) {
    orbax::ArraySpec s;
    s.path = SplitPath(q.path, true);
    s.key_types = KeyTypes(s.path);
    s.dtype = DType::kF32;
    s.shape = q.shape;
    s.fill = [shared, q](uint8_t* dst, size_t) -> Status {
      std::vector<const uint8_t*> ptrs;
      for (const std::string& k : q.peft) {
        const LoraFactors& f = shared->at(k);
        const bool is_a = k.ends_with(".lora_A.weight");
        ptrs.push_back(reinterpret_cast<const uint8_t*>(is_a ? f.a.data() : f.b.data()));
      }
      return PeftToQwix(q, ptrs, 4, dst);
    };
    ++rep.arrays;
    rep.bytes += uint64_t(q.rows * q.cols) * 4 * (q.shared_a ? 1 : q.peft.size());
    specs.push_back(std::move(s));
  }
  orbax::WriteOptions o;
  o.custom_metadata = {{"lora", {{"rank", rank}, {"alpha", double(src->scaling()) * double(rank)}}}};
  GK_RETURN_IF_ERROR(orbax::WriteStep(root, step, {{"model_params", std::move(specs)}}, o));
  return rep;
}

Result<ConvertReport> QwixOrbaxToPeft(const std::string& item_or_step, const std::string& config_dir,
                                      const std::string& out_dir, double alpha) {
  std::error_code ec;
  if (fs::exists(out_dir, ec)) return Status::Error(StrCat(out_dir, " already exists; not overwriting it"));
  GK_ASSIGN_OR_RETURN(std::unique_ptr<LoraSource> src, OpenQwixLoraSource(OrbaxItemDir(item_or_step), config_dir, alpha));
  std::vector<TensorSpec> specs;
  std::vector<std::string> targets;
  ConvertReport rep;
  rep.layout = "PEFT adapter";
  int64_t rank = 0;
  auto shared = std::shared_ptr<LoraSource>(std::move(src));
  for (const std::string& m : shared->Modules()) {
    GK_ASSIGN_OR_RETURN(LoraFactors f, shared->Factors(m));  // shapes; read again when writing
    rank = f.rank;
    for (int which = 0; which < 2; ++which) {
      const std::vector<int64_t> shape = which ? std::vector<int64_t>{f.out, f.rank} : std::vector<int64_t>{f.rank, f.in};
      specs.push_back({StrCat("base_model.model.", m, which ? ".lora_B.weight" : ".lora_A.weight"), DType::kF32, shape,
                       [shared, m, which](uint8_t* dst, size_t n) -> Status {
                         GK_ASSIGN_OR_RETURN(LoraFactors g, shared->Factors(m));
                         std::memcpy(dst, which ? g.b.data() : g.a.data(), n);
                         return Status::Ok();
                       }});
      rep.bytes += uint64_t(shape[0] * shape[1]) * 4;
    }
    ++rep.arrays;
    const std::string leaf = m.substr(m.rfind('.') + 1);
    if (std::find(targets.begin(), targets.end(), leaf) == targets.end()) targets.push_back(leaf);
  }
  fs::create_directories(out_dir, ec);
  if (ec) return Status::Error(StrCat(out_dir, ": cannot create: ", ec.message()));
  GK_RETURN_IF_ERROR(WriteSafetensors(out_dir + "/adapter_model.safetensors", specs, {{"format", "pt"}}));
  const nlohmann::json cfg = {{"peft_type", "LORA"}, {"task_type", "CAUSAL_LM"}, {"base_model_name_or_path", config_dir},
                              {"r", rank}, {"lora_alpha", double(shared->scaling()) * double(rank)},
                              {"lora_dropout", 0.0}, {"bias", "none"}, {"fan_in_fan_out", false},
                              {"use_rslora", false}, {"use_dora", false}, {"target_modules", targets},
                              {"inference_mode", true}};
  GK_RETURN_IF_ERROR(WriteFileAtomic(out_dir + "/adapter_config.json", cfg.dump(2) + "\n"));
  return rep;
}

}  // namespace gk::bridge
