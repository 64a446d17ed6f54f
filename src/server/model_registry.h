// Model names a request may ask for: the served names of the base model (vLLM's
// --served-model-name, default the --model path) and, once the adapter reader exists, one name
// per LoRA adapter (--lora NAME=DIR), which a request picks through its "model" field as in vLLM.
// An empty "model" means the base model (the first served name).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/openai_response.h"
#include "util/result.h"

namespace gk::server {

struct ModelTarget {
  std::string name;     // the name responses report
  int adapter = 0;      // 0: the base model; k > 0: the k-th LoRA adapter (engine-side id)
};

struct LoraSpec {
  std::string name, dir;
};
// "NAME=DIR" (vLLM's --lora-modules name=path).
Result<LoraSpec> ParseLoraSpec(const std::string& text);

class ModelRegistry {
 public:
  ModelRegistry(std::vector<std::string> served_names, std::string root, int64_t max_model_len, int64_t created);

  // Registers an adapter under its own name, with the base model as parent. Adapter ids start
  // at 1 in the order added. Fails on a name clash.
  Result<int> AddAdapter(const LoraSpec& spec);

  std::optional<ModelTarget> Resolve(const std::string& requested) const;
  const std::string& base_name() const { return names_.front(); }
  std::vector<ModelCard> Cards() const;

 private:
  std::vector<std::string> names_;
  std::string root_;
  int64_t max_model_len_, created_;
  std::vector<LoraSpec> adapters_;
};

}  // namespace gk::server
