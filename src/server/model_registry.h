// Model names a request may ask for: the served names of the base model (vLLM's
// --served-model-name, default the --model path) and one name per LoRA adapter of the server's
// LoraRegistry (--lora NAME=PATH, /v1/load_lora_adapter), which a request picks through its
// "model" field as in vLLM. An empty "model" means the base model (the first served name).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engines/serve/lora_registry.h"
#include "server/openai_response.h"
#include "util/result.h"

namespace gk::server {

struct ModelTarget {
  std::string name;     // the name responses report
  bool adapter = false; // a LoRA adapter of that name (else the base model)
};

struct LoraSpec {
  std::string name, dir;
};
// "NAME=DIR" (vLLM's --lora-modules name=path).
Result<LoraSpec> ParseLoraSpec(const std::string& text);

class ModelRegistry {
 public:
  // loras: the server's adapters (null: none); it must outlive the registry.
  ModelRegistry(std::vector<std::string> served_names, std::string root, int64_t max_model_len, int64_t created,
                LoraRegistry* loras = nullptr);

  std::optional<ModelTarget> Resolve(const std::string& requested) const;
  const std::string& base_name() const { return names_.front(); }
  bool IsBaseName(const std::string& name) const;
  LoraRegistry* loras() const { return loras_; }
  // The base model's cards, then each adapter's with the base as parent and its path as root.
  std::vector<ModelCard> Cards() const;

 private:
  std::vector<std::string> names_;
  std::string root_;
  int64_t max_model_len_, created_;
  LoraRegistry* loras_;
};

}  // namespace gk::server
