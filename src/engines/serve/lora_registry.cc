#include "engines/serve/lora_registry.h"

#include <algorithm>
#include <filesystem>

namespace gk {

Result<std::string> PathUnderRoot(const std::string& path, const std::string& root) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path root_path = fs::absolute(root, ec);
  if (!ec) root_path = fs::weakly_canonical(root_path, ec);
  if (ec) return Status::Error(StrCat("--lora-root ", root, ": ", ec.message()));
  fs::path p(path);
  if (p.is_relative()) p = root_path / p;
  const fs::path resolved = fs::weakly_canonical(p, ec);
  if (ec) return Status::Error(StrCat("lora_path '", path, "': ", ec.message()));
  const fs::path rel = resolved.lexically_relative(root_path);
  if (rel.empty() || *rel.begin() == "..") {
    return Status::Error(StrCat("lora_path '", path, "' is outside --lora-root ", root));
  }
  return resolved.string();
}

LoraRegistry::LoraRegistry(std::string base_dir, ModelConfig config, std::string prefix, LoraRegistryOptions options)
    : base_dir_(std::move(base_dir)), config_(std::move(config)), prefix_(std::move(prefix)), options_(std::move(options)) {}

Result<std::shared_ptr<const LoraWeights>> LoraRegistry::Load(const LoraLocation& where) const {
  return LoadLoraWeights(where, base_dir_, config_, prefix_, options_.max_lora_rank, options_.storage);
}

Status LoraRegistry::Add(const std::string& name, const LoraLocation& given, bool confined) {
  if (name.empty()) return Status::Error("the adapter name is empty");
  if (Has(name)) return Status::Error(StrCat("The lora adapter '", name, "' has already been loaded."));
  LoraLocation where = given;
  if (confined && !options_.root.empty()) {
    GK_ASSIGN_OR_RETURN(where.path, PathUnderRoot(given.path, options_.root));
  }
  GK_ASSIGN_OR_RETURN(std::shared_ptr<const LoraWeights> weights, Load(where));
  std::lock_guard<std::mutex> lock(mu_);
  if (entries_.count(name)) return Status::Error(StrCat("The lora adapter '", name, "' has already been loaded."));
  auto e = std::make_shared<Entry>();
  e->name = name;
  e->where = where;
  e->id = ++next_id_;
  e->order = e->id;
  e->last_used = ++clock_;
  e->weights = std::move(weights);
  entries_[name] = e;
  EvictLocked();
  return Status::Ok();
}

bool LoraRegistry::Remove(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.erase(name) > 0;
}

bool LoraRegistry::Has(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.count(name) > 0;
}

Result<EngineLora> LoraRegistry::Acquire(const std::string& name) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = entries_.find(name);
  if (it == entries_.end()) return Status::Error(StrCat("The model `", name, "` does not exist."));
  const std::shared_ptr<Entry> e = it->second;  // stays valid if removed meanwhile
  loaded_cv_.wait(lock, [&] { return !e->loading; });
  if (e->weights == nullptr) {
    e->loading = true;
    lock.unlock();
    auto weights = Load(e->where);
    lock.lock();
    e->loading = false;
    loaded_cv_.notify_all();
    if (!weights.ok()) {
      return Status::Error(StrCat("LoRA adapter '", name, "' could not be read again: ", weights.message()));
    }
    e->weights = std::move(*weights);
  }
  e->last_used = ++clock_;
  EngineLora out{e->id, e->name, e->weights};
  EvictLocked();
  return out;
}

void LoraRegistry::EvictLocked() {
  for (;;) {
    int loaded = 0;
    Entry* victim = nullptr;
    for (auto& [name, e] : entries_) {
      if (e->weights == nullptr) continue;
      ++loaded;
      // use_count 1: only this registry holds the weights (no request runs through them).
      if (!e->loading && e->weights.use_count() == 1 && (victim == nullptr || e->last_used < victim->last_used)) {
        victim = e.get();
      }
    }
    if (loaded <= std::max(options_.max_cpu_loras, 1) || victim == nullptr) return;
    victim->weights.reset();
  }
}

std::vector<LoraRegistry::Listing> LoraRegistry::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<uint64_t, Listing>> all;
  for (const auto& [name, e] : entries_) all.push_back({e->order, {name, e->where.path}});
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<Listing> out;
  for (auto& [order, l] : all) out.push_back(std::move(l));
  return out;
}

int LoraRegistry::loaded() const {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (const auto& [name, e] : entries_) n += e->weights != nullptr;
  return n;
}

}  // namespace gk
