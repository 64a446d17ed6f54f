#include "server/model_registry.h"

#include <algorithm>

#include "util/guarded_parse.h"

namespace gk::server {

Result<LoraSpec> ParseLoraSpec(const std::string& text) {
  if (!text.empty() && text.front() == '{') {  // vLLM's JSON form: {"name", "path", "base_model_name"}
    auto j = ParseJson(text, "--lora");
    if (!j.ok()) return j.status();
    if (!j->is_object() || !j->contains("name") || !(*j)["name"].is_string() || !j->contains("path") ||
        !(*j)["path"].is_string()) {
      return Result<LoraSpec>::Error(StrCat("--lora: '", text, "' needs string fields \"name\" and \"path\""));
    }
    return LoraSpec{(*j)["name"].get<std::string>(), (*j)["path"].get<std::string>()};
  }
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size()) {
    return Result<LoraSpec>::Error(StrCat("--lora: '", text, "' is not NAME=DIR"));
  }
  return LoraSpec{text.substr(0, eq), text.substr(eq + 1)};
}

ModelRegistry::ModelRegistry(std::vector<std::string> served_names, std::string root, int64_t max_model_len,
                             int64_t created, LoraRegistry* loras)
    : names_(std::move(served_names)), root_(std::move(root)), max_model_len_(max_model_len), created_(created),
      loras_(loras) {
  if (names_.empty()) names_.push_back(root_);
}

bool ModelRegistry::IsBaseName(const std::string& name) const {
  return std::find(names_.begin(), names_.end(), name) != names_.end();
}

std::optional<ModelTarget> ModelRegistry::Resolve(const std::string& requested) const {
  if (requested.empty()) return ModelTarget{names_.front(), false};
  if (IsBaseName(requested)) return ModelTarget{requested, false};
  if (loras_ != nullptr && loras_->Has(requested)) return ModelTarget{requested, true};
  return std::nullopt;
}

std::vector<ModelCard> ModelRegistry::Cards() const {
  std::vector<ModelCard> cards;
  for (const std::string& n : names_) cards.push_back({n, root_, "", created_, max_model_len_});
  if (loras_ != nullptr) {
    for (const LoraRegistry::Listing& a : loras_->List()) {
      cards.push_back({a.name, a.path, names_.front(), created_, max_model_len_});
    }
  }
  return cards;
}

}  // namespace gk::server
