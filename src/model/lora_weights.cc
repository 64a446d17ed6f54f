#include "model/lora_weights.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "model/lora_source.h"

namespace gk {

std::shared_ptr<const LoraWeights> LoraWeights::Create(LoraAdapter adapter, const ModelConfig& config) {
  auto w = std::make_shared<LoraWeights>();
  w->rank_ = adapter.rank();
  w->index_.assign(size_t(config.num_layers) * kNumLoraTargets, -1);
  const float scaling = adapter.scaling();
  for (LoraModule& m : adapter.modules()) {
    for (float& v : m.b) v *= scaling;
    const int64_t r = adapter.rank();
    w->bytes_ += (m.a.size() + m.b.size()) * sizeof(float);
    w->storage_.push_back(std::move(m.a));
    w->storage_.push_back(std::move(m.b));
    const float* a = w->storage_[w->storage_.size() - 2].data();
    const float* b = w->storage_.back().data();
    w->index_[size_t(m.layer) * kNumLoraTargets + size_t(m.target)] = int(w->factors_.size());
    w->factors_.push_back({MatrixView{DType::kF32, r, m.in, a}, MatrixView{DType::kF32, m.out, r, b}});
  }
  return w;
}

Result<LoraLocation> ParseLoraLocation(const std::string& text) {
  LoraLocation where;
  where.path = text;
  const size_t colon = text.rfind(":alpha=");
  if (colon != std::string::npos) {
    where.path = text.substr(0, colon);
    const std::string value = text.substr(colon + 7);
    char* end = nullptr;
    where.alpha = std::strtod(value.c_str(), &end);
    if (value.empty() || end != value.c_str() + value.size() || !(where.alpha > 0) || !std::isfinite(where.alpha)) {
      return Status::Error(StrCat("'", text, "': alpha must be a positive number, got '", value, "'"));
    }
  }
  if (where.path.empty()) return Status::Error(StrCat("'", text, "': the adapter path is empty"));
  return where;
}

Result<std::shared_ptr<const LoraWeights>> LoadLoraWeights(const LoraLocation& where, const std::string& base_dir,
                                                           const ModelConfig& config, const std::string& prefix,
                                                           int max_rank) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(where.path, ec)) {
    return Status::Error(StrCat(where.path, ": no such adapter directory (a PEFT adapter or a Qwix Orbax item)"));
  }
  Result<LoraAdapter> adapter = Status::Error("");
  if (fs::exists(where.path + "/adapter_config.json", ec)) {
    if (where.alpha > 0) {
      return Status::Error(StrCat(where.path, ": alpha= is for Qwix items; a PEFT adapter has its own lora_alpha"));
    }
    adapter = LoraAdapter::LoadPeft(where.path, config, prefix);
  } else {
    // A step directory of a Tunix checkpoint holds the item as model_params.
    const std::string item = fs::is_directory(where.path + "/model_params", ec) ? where.path + "/model_params" : where.path;
    auto source = OpenQwixLoraSource(item, base_dir, where.alpha);
    if (!source.ok()) {
      return Status::Error(StrCat(where.path, ": neither a PEFT adapter (no adapter_config.json) nor a Qwix Orbax item (",
                                  source.message(), ")"));
    }
    adapter = LoraAdapter::FromSource(**source, config, prefix);
  }
  if (!adapter.ok()) return adapter.status();
  if (max_rank > 0 && adapter->rank() > max_rank) {
    return Status::Error(StrCat(where.path, ": the adapter's rank ", adapter->rank(), " is above --max-lora-rank ",
                                max_rank));
  }
  return LoraWeights::Create(std::move(*adapter), config);
}

}  // namespace gk
