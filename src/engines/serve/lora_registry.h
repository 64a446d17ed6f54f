// The LoRA adapters a server offers, by name (vLLM's --lora-modules, /v1/load_lora_adapter and
// /v1/unload_lora_adapter), and which of them are loaded.
//
// Adapters are read and checked when added (a bad one is refused then, not at its first
// request). Loaded adapters form an LRU cache of max_cpu_loras: beyond it the least recently
// used adapter that no request holds is dropped, and read again by the next request that names
// it (on that request's thread, never the engine's). Requests hold their adapter's weights
// (EngineLora), so removing or evicting an adapter never disturbs a request that runs through
// it; a name removed and added again gets a new id, and so new prefix-cache keys.
// Thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engines/serve/engine.h"
#include "model/config.h"
#include "model/lora_weights.h"
#include "util/result.h"

namespace gk {

struct LoraRegistryOptions {
  int max_cpu_loras = 1;    // adapters kept loaded (more while requests hold them)
  int max_lora_rank = 16;   // vLLM's default; a higher rank is refused
  std::string root;         // Add(..., confined = true) reads only under it; "" = anywhere
  DType storage = DType::kF32;  // the factors' dtype: the base model's (LoraWeights)
};

class LoraRegistry {
 public:
  // base_dir: the served model's directory (its config.json and tensor prefix `prefix`).
  LoraRegistry(std::string base_dir, ModelConfig config, std::string prefix, LoraRegistryOptions options);

  // Registers `name` and loads the adapter (checked against the model). confined: the path
  // must lie under options.root (runtime loads); a relative path is taken from the root.
  // Errors: the name is taken, a path outside the root, a bad adapter.
  Status Add(const std::string& name, const LoraLocation& where, bool confined);
  // Forgets `name`; false when it is not registered. Requests running through it finish.
  bool Remove(const std::string& name);
  bool Has(const std::string& name) const;
  // The adapter's weights for a request, read again if they were evicted. Errors: an unknown
  // name, an adapter that can no longer be read.
  Result<EngineLora> Acquire(const std::string& name);

  struct Listing {
    std::string name, path;
  };
  std::vector<Listing> List() const;  // in the order added
  int loaded() const;                 // adapters in memory now

 private:
  struct Entry {
    std::string name;
    LoraLocation where;
    uint64_t id = 0, order = 0, last_used = 0;
    std::shared_ptr<const LoraWeights> weights;  // null: not loaded
    bool loading = false;
  };
  Result<std::shared_ptr<const LoraWeights>> Load(const LoraLocation& where) const;
  void EvictLocked();

  const std::string base_dir_;
  const ModelConfig config_;
  const std::string prefix_;
  const LoraRegistryOptions options_;
  mutable std::mutex mu_;
  std::condition_variable loaded_cv_;
  std::map<std::string, std::shared_ptr<Entry>> entries_;
  uint64_t next_id_ = 0, clock_ = 0;
};

// `path` (relative ones taken from root) when it lies under `root` once symbolic links and
// ".." are resolved; an error naming both otherwise.
Result<std::string> PathUnderRoot(const std::string& path, const std::string& root);

}  // namespace gk
