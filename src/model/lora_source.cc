#include "model/lora_source.h"

#include <cmath>
#include <cstring>
#include <map>

#include <nlohmann/json.hpp>

#include "formats/safetensors.h"
#include "tensor/dtype.h"
#include "util/atomic_file.h"
#include "util/guarded_parse.h"

namespace gk {
namespace {

constexpr std::string_view kPrefix = "base_model.model.";

Status ReadF32(const SafetensorsFile& f, const TensorInfo& t, std::vector<float>* out) {
  if (t.dtype != DType::kF32 && t.dtype != DType::kBF16 && t.dtype != DType::kF16) {
    return Status::Error(StrCat(f.path(), ": ", t.name, " has dtype ", DTypeName(t.dtype), " (want F32/BF16/F16)"));
  }
  std::vector<uint8_t> raw(t.nbytes);
  GK_RETURN_IF_ERROR(f.ReadInto(t, raw.data()));
  out->resize(size_t(t.numel()));
  WidenToF32(t.dtype, raw.data(), t.numel(), out->data());
  return Status::Ok();
}

class PeftLoraSource : public LoraSource {
 public:
  std::vector<std::string> Modules() const override {
    std::vector<std::string> m;
    for (const auto& [name, ab] : modules_) m.push_back(name);
    return m;
  }
  Result<LoraFactors> Factors(const std::string& module) const override {
    auto it = modules_.find(module);
    if (it == modules_.end()) return Status::Error(StrCat(dir_, ": no LoRA for ", module));
    const TensorInfo &ta = *it->second.first, &tb = *it->second.second;
    LoraFactors f;
    f.rank = ta.shape[0];
    f.in = ta.shape[1];
    f.out = tb.shape[0];
    GK_RETURN_IF_ERROR(ReadF32(*file_, ta, &f.a));
    GK_RETURN_IF_ERROR(ReadF32(*file_, tb, &f.b));
    return f;
  }
  float scaling() const override { return scaling_; }
  std::string Describe() const override {
    return StrCat("PEFT adapter ", dir_, " (r ", rank_, ", alpha ", alpha_, use_rslora_ ? ", rsLoRA" : "", ", ",
                  modules_.size(), " modules)");
  }

  std::string dir_;
  std::unique_ptr<SafetensorsFile> file_;
  std::map<std::string, std::pair<const TensorInfo*, const TensorInfo*>> modules_;
  int64_t rank_ = 0;
  double alpha_ = 0;
  bool use_rslora_ = false;
  float scaling_ = 1.f;
};

Result<std::unique_ptr<LoraSource>> OpenPeftLoraSourceUnguarded(const std::string& dir) {
  auto src = std::make_unique<PeftLoraSource>();
  src->dir_ = dir;
  GK_ASSIGN_OR_RETURN(std::string text, ReadFile(dir + "/adapter_config.json"));
  GK_ASSIGN_OR_RETURN(const nlohmann::json j, ParseJson(text, dir + "/adapter_config.json"));
  if (!j.is_object() || !j.contains("r") || !j["r"].is_number_integer() || j["r"].get<int64_t>() < 1 ||
      !j.contains("lora_alpha") || !j["lora_alpha"].is_number()) {
    return Status::Error(StrCat(dir, "/adapter_config.json: needs integer \"r\" >= 1 and number \"lora_alpha\""));
  }
  if (j.contains("peft_type") && j["peft_type"] != "LORA") return Status::Error(StrCat(dir, ": not a LoRA adapter"));
  if (j.contains("use_dora") && j["use_dora"] == true) {
    return Status::Error(StrCat(dir, ": DoRA adapters are not supported"));
  }
  for (const char* k : {"rank_pattern", "alpha_pattern"}) {
    if (j.contains(k) && j[k].is_object() && !j[k].empty()) {
      return Status::Error(StrCat(dir, ": ", k, " (per-module ranks/alphas) is not supported"));
    }
  }
  src->rank_ = j["r"].get<int64_t>();
  src->alpha_ = j["lora_alpha"].get<double>();
  src->use_rslora_ = j.contains("use_rslora") && j["use_rslora"] == true;
  src->scaling_ = float(src->use_rslora_ ? src->alpha_ / std::sqrt(double(src->rank_)) : src->alpha_ / double(src->rank_));
  GK_ASSIGN_OR_RETURN(src->file_, SafetensorsFile::Open(dir + "/adapter_model.safetensors"));
  std::map<std::string, const TensorInfo*> a, b;
  for (const TensorInfo& t : src->file_->tensors()) {
    std::string name = t.name;
    if (!name.starts_with(kPrefix)) {
      return Status::Error(StrCat(src->file_->path(), ": tensor ", name, " does not start with ", kPrefix));
    }
    name = name.substr(kPrefix.size());
    // PEFT strips the adapter name on save; accept ".lora_A.default.weight" too.
    for (const char* sfx : {".lora_A.weight", ".lora_A.default.weight"}) {
      if (name.ends_with(sfx)) a[name.substr(0, name.size() - strlen(sfx))] = &t;
    }
    for (const char* sfx : {".lora_B.weight", ".lora_B.default.weight"}) {
      if (name.ends_with(sfx)) b[name.substr(0, name.size() - strlen(sfx))] = &t;
    }
  }
  for (const auto& [m, ta] : a) {
    auto tb = b.find(m);
    if (tb == b.end()) return Status::Error(StrCat(src->file_->path(), ": ", m, " has lora_A but no lora_B"));
    if (ta->shape.size() != 2 || tb->second->shape.size() != 2 || ta->shape[0] != src->rank_ ||
        tb->second->shape[1] != src->rank_) {
      return Status::Error(StrCat(src->file_->path(), ": ", m, " factors are not (r, in) and (out, r) with r = ", src->rank_));
    }
    src->modules_[m] = {ta, tb->second};
  }
  if (b.size() != a.size()) return Status::Error(StrCat(src->file_->path(), ": a lora_B without its lora_A"));
  if (src->modules_.empty()) return Status::Error(StrCat(src->file_->path(), ": no LoRA factors"));
  return std::unique_ptr<LoraSource>(std::move(src));
}

}  // namespace

// The adapter is outside input: whatever parsing it throws is an error (util/guarded_parse.h).
Result<std::unique_ptr<LoraSource>> OpenPeftLoraSource(const std::string& dir) {
  return GuardedParse(dir, [&] { return OpenPeftLoraSourceUnguarded(dir); });
}

}  // namespace gk
