// OpenQwixLoraSource: the Qwix LoRA factors of a Tunix Orbax item as PEFT factors.
#include <cmath>
#include <cstring>
#include <map>

#include "formats/orbax/orbax.h"
#include "formats/safetensors.h"
#include "model/config.h"
#include "model/tunix_layout.h"
#include "model/weights.h"
#include "tensor/dtype.h"
#include "model/lora_source.h"
#include "util/guarded_parse.h"

namespace gk {
namespace {

Result<std::vector<float>> ReadArrayF32(const orbax::Item& item, const orbax::ArrayInfo& a) {
  if (a.dtype != DType::kF32 && a.dtype != DType::kBF16 && a.dtype != DType::kF16) {
    return Status::Error(StrCat(item.dir(), ": ", a.name, " has dtype ", a.stored_dtype, " (want f32/bf16/f16)"));
  }
  std::vector<uint8_t> raw(a.nbytes());
  GK_RETURN_IF_ERROR(item.Read(a, raw.data()));
  std::vector<float> out(static_cast<size_t>(a.numel()));
  WidenToF32(a.dtype, raw.data(), a.numel(), out.data());
  return out;
}

class QwixLoraSource : public LoraSource {
 public:
  std::vector<std::string> Modules() const override { return modules_; }
  float scaling() const override { return scaling_; }
  std::string Describe() const override {
    return StrCat("Qwix LoRA ", item_->dir(), " (r ", rank_, ", alpha ", alpha_, ", ", modules_.size(), " modules)");
  }
  Result<LoraFactors> Factors(const std::string& module) const override {
    const std::string ka = StrCat("base_model.model.", module, ".lora_A.weight");
    const std::string kb = StrCat("base_model.model.", module, ".lora_B.weight");
    LoraFactors f;
    f.rank = rank_;
    for (const auto& [q, info] : arrays_) {
      for (size_t i = 0; i < q.peft.size(); ++i) {
        if (q.peft[i] != ka && q.peft[i] != kb) continue;
        GK_ASSIGN_OR_RETURN(std::vector<float> data, ReadArrayF32(*item_, *info));
        std::vector<std::vector<float>> bufs(q.peft.size(), std::vector<float>(size_t(q.rows * q.cols)));
        std::vector<uint8_t*> ptrs;
        for (auto& b : bufs) ptrs.push_back(reinterpret_cast<uint8_t*>(b.data()));
        QwixToPeft(q, reinterpret_cast<const uint8_t*>(data.data()), 4, ptrs);
        if (q.peft[i] == ka) {
          f.a = std::move(bufs[i]);
          f.in = q.peft_shape[1];
        } else {
          f.b = std::move(bufs[i]);
          f.out = q.peft_shape[0];
        }
      }
    }
    if (f.a.empty() || f.b.empty()) return Status::Error(StrCat(Describe(), ": no factors for ", module));
    return f;
  }

  std::unique_ptr<orbax::Item> item_;
  std::vector<std::pair<QwixLoraArray, const orbax::ArrayInfo*>> arrays_;
  std::vector<std::string> modules_;
  int64_t rank_ = 0;
  double alpha_ = 0;
  float scaling_ = 1.f;
};

Result<std::unique_ptr<LoraSource>> OpenQwixLoraSourceUnguarded(const std::string& item_dir,
                                                                const std::string& base_dir, double alpha) {
  GK_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(base_dir));
  GK_ASSIGN_OR_RETURN(SafetensorsSet base, SafetensorsSet::Open(base_dir));
  GK_ASSIGN_OR_RETURN(std::string prefix, DetectWeightPrefix(base, base_dir));
  auto src = std::make_unique<QwixLoraSource>();
  GK_ASSIGN_OR_RETURN(src->item_, orbax::Item::Open(item_dir));
  // Arrays by their layout key; the rank from the first factor.
  std::map<std::string, const orbax::ArrayInfo*> by_key;
  for (const orbax::ArrayInfo& a : src->item_->arrays()) {
    const std::string k = TunixKey(a.path);
    by_key[k] = &a;
    if (src->rank_ == 0 && k.ends_with("_lora_a") && !a.shape.empty()) src->rank_ = a.shape.back();
  }
  if (src->rank_ == 0) return Status::Error(StrCat(item_dir, ": no Qwix LoRA factors (*_lora_a arrays)"));
  // Every projection, then keep those whose factors are in the item.
  std::vector<std::string> all;
  for (int l = 0; l < config.num_layers; ++l) {
    for (const char* m : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                          "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}) {
      if (std::string(m) == "self_attn.v_proj" && config.KEqV(l)) continue;
      all.push_back(StrCat(prefix, "layers.", l, ".", m));
    }
  }
  GK_ASSIGN_OR_RETURN(std::vector<QwixLoraArray> layout, QwixLoraLayout(config, prefix, int(src->rank_), all));
  std::map<std::string, int> modules;
  size_t matched = 0;
  for (QwixLoraArray& q : layout) {
    auto it = by_key.find(q.path);
    if (it == by_key.end()) continue;
    if (it->second->shape != q.shape) {
      return Status::Error(StrCat(item_dir, ": ", q.path, " has shape ", it->second->shape.size(), "-D ",
                                  it->second->shape.empty() ? 0 : it->second->shape[0], "..., the model wants ",
                                  q.shape.size(), "-D ", q.shape[0], "..."));
    }
    ++matched;
    for (const std::string& k : q.peft) {
      const std::string module = k.substr(std::string("base_model.model.").size(),
                                          k.size() - std::string("base_model.model.").size() - std::string(".lora_A.weight").size());
      ++modules[module];
    }
    src->arrays_.emplace_back(std::move(q), it->second);
  }
  size_t lora_arrays = 0;
  for (const auto& [k, a] : by_key) lora_arrays += k.ends_with("_lora_a") || k.ends_with("_lora_b");
  if (matched != lora_arrays) {
    return Status::Error(StrCat(item_dir, ": ", lora_arrays - matched, " LoRA array(s) match no projection of ", base_dir));
  }
  for (const auto& [m, n] : modules) {
    if (n != 2) return Status::Error(StrCat(item_dir, ": ", m, " lacks its lora_a or lora_b array"));
    src->modules_.push_back(m);
  }
  src->alpha_ = alpha > 0 ? alpha : double(src->rank_);
  src->scaling_ = float(src->alpha_ / double(src->rank_));
  return std::unique_ptr<LoraSource>(std::move(src));
}

}  // namespace

// The item is outside input: whatever parsing it throws is an error (util/guarded_parse.h).
Result<std::unique_ptr<LoraSource>> OpenQwixLoraSource(const std::string& item_dir, const std::string& base_dir,
                                                       double alpha) {
  return GuardedParse(item_dir, [&] { return OpenQwixLoraSourceUnguarded(item_dir, base_dir, alpha); });
}

}  // namespace gk
