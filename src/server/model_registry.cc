#include "server/model_registry.h"

namespace gk::server {

Result<LoraSpec> ParseLoraSpec(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size()) {
    return Result<LoraSpec>::Error(StrCat("--lora: '", text, "' is not NAME=DIR"));
  }
  return LoraSpec{text.substr(0, eq), text.substr(eq + 1)};
}

ModelRegistry::ModelRegistry(std::vector<std::string> served_names, std::string root, int64_t max_model_len,
                             int64_t created)
    : names_(std::move(served_names)), root_(std::move(root)), max_model_len_(max_model_len), created_(created) {
  if (names_.empty()) names_.push_back(root_);
}

Result<int> ModelRegistry::AddAdapter(const LoraSpec& spec) {
  if (Resolve(spec.name)) return Result<int>::Error(StrCat("--lora: the name '", spec.name, "' is already taken"));
  adapters_.push_back(spec);
  return int(adapters_.size());
}

std::optional<ModelTarget> ModelRegistry::Resolve(const std::string& requested) const {
  if (requested.empty()) return ModelTarget{names_.front(), 0};
  for (const std::string& n : names_) {
    if (n == requested) return ModelTarget{n, 0};
  }
  for (size_t i = 0; i < adapters_.size(); ++i) {
    if (adapters_[i].name == requested) return ModelTarget{adapters_[i].name, int(i + 1)};
  }
  return std::nullopt;
}

std::vector<ModelCard> ModelRegistry::Cards() const {
  std::vector<ModelCard> cards;
  for (const std::string& n : names_) cards.push_back({n, root_, "", created_, max_model_len_});
  for (const LoraSpec& a : adapters_) cards.push_back({a.name, a.dir, names_.front(), created_, max_model_len_});
  return cards;
}

}  // namespace gk::server
