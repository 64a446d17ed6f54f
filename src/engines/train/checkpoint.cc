#include "engines/train/checkpoint.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2, RENAME_EXCHANGE (glibc >= 2.28)
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <utility>

#include "formats/safetensors.h"
#include "tensor/dtype.h"
#include "util/atomic_file.h"
#include "util/guarded_parse.h"

namespace gk::train {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kAdapterConfig = "adapter_config.json";
constexpr const char* kAdapterModel = "adapter_model.safetensors";
constexpr const char* kFullModel = "model.safetensors";
constexpr const char* kOptimizer = "optimizer.safetensors";
constexpr const char* kTrainerState = "trainer_state.json";
constexpr const char* kCheckpointPrefix = "checkpoint-";
constexpr const char* kTmpPrefix = ".checkpoint-";
constexpr const char* kTmpMarker = ".tmp-";

std::string Errno() { return std::strerror(errno); }


// "checkpoint-<N>" with N in canonical decimal (no sign, no leading zeros), as we write it; any
// other name is not ours and is ignored.
std::optional<int64_t> ParseCheckpointName(const std::string& name) {
  const size_t plen = std::strlen(kCheckpointPrefix);
  if (name.size() <= plen || name.compare(0, plen, kCheckpointPrefix) != 0) return std::nullopt;
  const char* b = name.data() + plen;
  const char* e = name.data() + name.size();
  if (*b < '0' || *b > '9') return std::nullopt;
  int64_t n = 0;
  auto [p, ec] = std::from_chars(b, e, n);
  if (ec != std::errc() || p != e || std::to_string(n) != std::string(b, e)) return std::nullopt;
  return n;
}

bool IsTmpName(const std::string& name) {
  return name.rfind(kTmpPrefix, 0) == 0 && name.find(kTmpMarker) != std::string::npos;
}

Result<json> ReadJson(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    return Result<json>::Error(StrCat(path, " is missing (the checkpoint is incomplete or damaged)"));
  }
  GK_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  auto j = ParseJson(text, path);
  if (!j.ok()) return Result<json>::Error(StrCat(j.message(), " (truncated or damaged)"));
  return j;
}

// Complete exactly when trainer_state.json parses and says "complete": true; it is written
// last, so its presence vouches for every other file.
bool IsComplete(const fs::path& dir) {
  auto state = ReadJson((dir / kTrainerState).string());
  if (!state.ok() || !state->is_object()) return false;
  auto it = state->find("complete");
  return it != state->end() && it->is_boolean() && it->get<bool>();
}

struct Entry {
  int64_t step;
  fs::path path;
};

struct Listing {
  std::vector<Entry> complete;  // checkpoint-<N> directories that are complete, by step ascending
  std::vector<fs::path> tmp;    // .checkpoint-*.tmp-* leftovers
};

Result<Listing> ListRun(const std::string& run_dir) {
  Listing out;
  std::error_code ec;
  fs::directory_iterator it(run_dir, ec);
  if (ec) return Result<Listing>::Error(StrCat("cannot list run directory ", run_dir, ": ", ec.message()));
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code dec;
    if (IsTmpName(name)) {
      out.tmp.push_back(it->path());
    } else if (auto step = ParseCheckpointName(name); step && it->is_directory(dec) &&
                                                      IsComplete(it->path())) {
      out.complete.push_back({*step, it->path()});
    }
  }
  if (ec) return Result<Listing>::Error(StrCat("cannot list run directory ", run_dir, ": ", ec.message()));
  std::sort(out.complete.begin(), out.complete.end(),
            [](const Entry& a, const Entry& b) { return a.step < b.step; });
  return out;
}

Status RemoveTree(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
  if (ec) return Status::Error(StrCat("cannot remove ", p.string(), ": ", ec.message()));
  return Status::Ok();
}

Status CheckTensors(const std::vector<NamedTensor>& tensors, const char* file) {
  for (const NamedTensor& t : tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) {
      if (d < 0 || (d != 0 && n > INT64_MAX / d)) {
        return Status::Error(StrCat(file, ": tensor '", t.name, "' has an invalid shape"));
      }
      n *= d;
    }
    if (t.external == nullptr && uint64_t(n) != t.data.size()) {
      return Status::Error(StrCat(file, ": tensor '", t.name, "' has ", t.data.size(),
                                  " values but its shape holds ", n));
    }
  }
  return Status::Ok();
}

Status WriteTensors(const std::string& path, const std::vector<NamedTensor>& tensors) {
  std::vector<TensorSpec> specs;
  specs.reserve(tensors.size());
  for (const NamedTensor& t : tensors) {
    TensorSpec s;
    s.name = t.name;
    s.dtype = DType::kF32;
    s.shape = t.shape;
    s.fill = [&t](uint8_t* dst, size_t nbytes) -> Status {
      if (t.external == nullptr && nbytes != t.data.size() * sizeof(float)) {
        return Status::Error(StrCat("expected ", t.data.size() * sizeof(float), " bytes, got ", nbytes));
      }
      if (nbytes > 0) std::memcpy(dst, t.values(), nbytes);
      return Status::Ok();
    };
    specs.push_back(std::move(s));
  }
  // PEFT writes {"format": "pt"}; some loaders (transformers' safe_open path) check it.
  return WriteSafetensors(path, specs, {{"format", "pt"}});
}

Result<std::vector<NamedTensor>> ReadTensors(const std::string& path) {
  using R = Result<std::vector<NamedTensor>>;
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    return R::Error(StrCat(path, " is missing (the checkpoint is incomplete or damaged)"));
  }
  auto file = SafetensorsFile::Open(path);
  if (!file.ok()) return R::Error(file.message());
  std::vector<NamedTensor> out;
  std::vector<uint16_t> half;
  for (const TensorInfo& info : (*file)->tensors()) {  // sorted by offset: file order
    NamedTensor t;
    t.name = info.name;
    t.shape = info.shape;
    const int64_t n = info.numel();
    t.data.resize(size_t(n));
    if (info.dtype == DType::kF32) {
      GK_RETURN_IF_ERROR((*file)->ReadInto(info, t.data.data()));
    } else if (info.dtype == DType::kBF16 || info.dtype == DType::kF16) {
      // PEFT adapters are often saved in bf16; widening is exact.
      half.resize(size_t(n));
      GK_RETURN_IF_ERROR((*file)->ReadInto(info, half.data()));
      for (int64_t i = 0; i < n; ++i) {
        t.data[i] = info.dtype == DType::kBF16 ? Bf16ToF32(half[i]) : F16ToF32(half[i]);
      }
    } else {
      return R::Error(StrCat(path, ": tensor '", info.name, "' has dtype ", DTypeName(info.dtype),
                             "; checkpoint tensors must be F32 (or BF16/F16)"));
    }
    out.push_back(std::move(t));
  }
  return out;
}


// Puts the finished tmp directory at `final_dir`. If a checkpoint of the same step exists
// already (a resumed run saving that step again), the two are swapped in one atomic
// renameat2(RENAME_EXCHANGE), so the name always holds a complete checkpoint; `old_out` then
// names the replaced one for removal. File systems without RENAME_EXCHANGE get the old one
// renamed aside first (a kill between the two renames leaves that step only in tmp dirs).
Status MoveIntoPlace(const fs::path& tmp, const fs::path& final_dir, const fs::path& aside,
                     fs::path* old_out) {
  std::error_code ec;
  const bool exists = fs::exists(fs::symlink_status(final_dir, ec));
  if (!exists) {
    if (::rename(tmp.c_str(), final_dir.c_str()) != 0) {
      return Status::Error(StrCat("rename ", tmp.string(), " -> ", final_dir.string(), ": ", Errno()));
    }
    return Status::Ok();
  }
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
    *old_out = tmp;
    return Status::Ok();
  }
  if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) {
    return Status::Error(StrCat("exchanging ", tmp.string(), " and ", final_dir.string(), ": ", Errno()));
  }
  GK_RETURN_IF_ERROR(RemoveTree(aside));
  if (::rename(final_dir.c_str(), aside.c_str()) != 0) {
    return Status::Error(StrCat("rename ", final_dir.string(), " -> ", aside.string(), ": ", Errno()));
  }
  if (::rename(tmp.c_str(), final_dir.c_str()) != 0) {
    const std::string err = Errno();
    ::rename(aside.c_str(), final_dir.c_str());  // put the old one back; best effort
    return Status::Error(StrCat("rename ", tmp.string(), " -> ", final_dir.string(), ": ", err));
  }
  *old_out = aside;
  return Status::Ok();
}

}  // namespace

Status SaveCheckpoint(const std::string& run_dir, const CheckpointContents& contents, int64_t keep_last) {
  const json& state = contents.trainer_state;
  if (!state.is_object() || !state.contains("step") || !state["step"].is_number_integer() ||
      (state["step"].is_number_unsigned() && state["step"].get<uint64_t>() > uint64_t(INT64_MAX)) ||
      state["step"].get<int64_t>() < 0) {
    return Status::Error(StrCat("saving a checkpoint in ", run_dir,
                                ": trainer_state must be a JSON object with a non-negative integer "
                                "\"step\", got ", state.dump()));
  }
  if (!contents.full && !contents.adapter_config.is_object()) {
    return Status::Error(StrCat("saving a checkpoint in ", run_dir,
                                ": adapter_config must be a JSON object, got ",
                                contents.adapter_config.type_name()));
  }
  const char* params_file = contents.full ? kFullModel : kAdapterModel;
  GK_RETURN_IF_ERROR(CheckTensors(contents.params, params_file));
  GK_RETURN_IF_ERROR(CheckTensors(contents.optimizer, kOptimizer));
  const int64_t step = state["step"].get<int64_t>();

  std::error_code ec;
  const fs::path run(run_dir);
  if (!fs::is_directory(run, ec)) {
    fs::create_directories(run, ec);
    if (ec) return Status::Error(StrCat("cannot create run directory ", run_dir, ": ", ec.message()));
    const fs::path parent = fs::absolute(run, ec).parent_path();
    if (!parent.empty()) GK_RETURN_IF_ERROR(FsyncDir(parent.string()));
  }

  // Leftovers of killed saves go first: they hold disk space the new checkpoint may need.
  {
    GK_ASSIGN_OR_RETURN(Listing listing, ListRun(run_dir));
    for (const fs::path& p : listing.tmp) GK_RETURN_IF_ERROR(RemoveTree(p));
  }

  const std::string pid = std::to_string(::getpid());
  const std::string step_str = std::to_string(step);
  const fs::path tmp = run / StrCat(kTmpPrefix, step_str, kTmpMarker, pid);
  const fs::path final_dir = run / StrCat(kCheckpointPrefix, step_str);
  GK_RETURN_IF_ERROR(RemoveTree(tmp));
  if (!fs::create_directory(tmp, ec) || ec) {
    return Status::Error(StrCat("cannot create ", tmp.string(), ": ",
                                ec ? ec.message() : "it exists already"));
  }
  TmpDirGuard guard(tmp);

  // Each file is written to a temporary name, fsynced and renamed (AtomicFile), so even within
  // the tmp directory no file is ever torn. trainer_state.json goes last: it marks completion.
  GK_RETURN_IF_ERROR(WriteTensors((tmp / params_file).string(), contents.params));
  GK_RETURN_IF_ERROR(WriteTensors((tmp / kOptimizer).string(), contents.optimizer));
  if (!contents.full) {
    GK_RETURN_IF_ERROR(WriteFileAtomic((tmp / kAdapterConfig).string(), contents.adapter_config.dump(2) + "\n"));
  }
  json final_state = state;
  final_state["complete"] = true;
  GK_RETURN_IF_ERROR(WriteFileAtomic((tmp / kTrainerState).string(), final_state.dump(2) + "\n"));
  GK_RETURN_IF_ERROR(FsyncDir(tmp.string()));

  fs::path old;
  const fs::path aside = run / StrCat(kTmpPrefix, step_str, kTmpMarker, pid, ".old");
  GK_RETURN_IF_ERROR(MoveIntoPlace(tmp, final_dir, aside, &old));
  guard.Release();
  GK_RETURN_IF_ERROR(FsyncDir(run_dir));
  if (!old.empty()) GK_RETURN_IF_ERROR(RemoveTree(old));

  // Prune. The new checkpoint is always kept, even when a run resumed from an older one and
  // newer step numbers exist. Each victim is renamed to a tmp name first, so a kill in the
  // middle of the (slow) recursive removal never leaves a half checkpoint under its real name.
  if (keep_last > 0) {
    GK_ASSIGN_OR_RETURN(Listing listing, ListRun(run_dir));
    std::vector<fs::path> doomed;
    int64_t kept = 1;  // the new one
    for (auto it = listing.complete.rbegin(); it != listing.complete.rend(); ++it) {
      if (it->step == step) continue;
      if (kept < keep_last) {
        ++kept;
        continue;
      }
      const fs::path del = run / StrCat(kTmpPrefix, it->step, kTmpMarker, pid, ".del");
      GK_RETURN_IF_ERROR(RemoveTree(del));
      if (::rename(it->path.c_str(), del.c_str()) != 0) {
        return Status::Error(StrCat("rename ", it->path.string(), " -> ", del.string(), ": ", Errno()));
      }
      doomed.push_back(del);
    }
    if (!doomed.empty()) GK_RETURN_IF_ERROR(FsyncDir(run_dir));
    for (const fs::path& p : doomed) GK_RETURN_IF_ERROR(RemoveTree(p));
  }
  return Status::Ok();
}

Result<std::optional<std::string>> FindLatestCheckpoint(const std::string& run_dir) {
  using R = Result<std::optional<std::string>>;
  std::error_code ec;
  const fs::file_status st = fs::status(run_dir, ec);
  if (st.type() == fs::file_type::not_found) return std::optional<std::string>();
  if (ec) return R::Error(StrCat("cannot read run directory ", run_dir, ": ", ec.message()));
  if (!fs::is_directory(st)) return R::Error(StrCat("run directory ", run_dir, " is not a directory"));
  GK_ASSIGN_OR_RETURN(Listing listing, ListRun(run_dir));
  if (listing.complete.empty()) return std::optional<std::string>();
  return std::optional<std::string>(listing.complete.back().path.string());
}

namespace {

Result<CheckpointContents> LoadCheckpointUnguarded(const std::string& checkpoint_dir) {
  using R = Result<CheckpointContents>;
  std::error_code ec;
  if (!fs::is_directory(checkpoint_dir, ec)) {
    return R::Error(StrCat("checkpoint directory ", checkpoint_dir, " does not exist"));
  }
  const fs::path dir(checkpoint_dir);
  CheckpointContents out;

  const std::string state_path = (dir / kTrainerState).string();
  GK_ASSIGN_OR_RETURN(out.trainer_state, ReadJson(state_path));
  if (!out.trainer_state.is_object()) {
    return R::Error(StrCat(state_path, " must hold a JSON object, got ", out.trainer_state.type_name()));
  }
  auto complete = out.trainer_state.find("complete");
  if (complete == out.trainer_state.end() || !complete->is_boolean() || !complete->get<bool>()) {
    return R::Error(StrCat(state_path, " is not marked \"complete\": true; the checkpoint was not "
                                       "finished"));
  }
  // The marker is ours, not the trainer's: hand back exactly the state that was saved.
  out.trainer_state.erase(complete);
  if (!out.trainer_state.contains("step") || !out.trainer_state["step"].is_number_integer()) {
    return R::Error(StrCat(state_path, " has no integer \"step\""));
  }

  // A full fine-tuning checkpoint has the masters and no adapter.
  out.full = fs::exists(dir / kFullModel, ec) && !fs::exists(dir / kAdapterModel, ec);
  if (out.full) {
    GK_ASSIGN_OR_RETURN(out.params, ReadTensors((dir / kFullModel).string()));
    GK_ASSIGN_OR_RETURN(out.optimizer, ReadTensors((dir / kOptimizer).string()));
    return out;
  }
  const std::string config_path = (dir / kAdapterConfig).string();
  GK_ASSIGN_OR_RETURN(out.adapter_config, ReadJson(config_path));
  if (!out.adapter_config.is_object()) {
    return R::Error(StrCat(config_path, " must hold a JSON object, got ", out.adapter_config.type_name()));
  }
  GK_ASSIGN_OR_RETURN(out.params, ReadTensors((dir / kAdapterModel).string()));
  GK_ASSIGN_OR_RETURN(out.optimizer, ReadTensors((dir / kOptimizer).string()));
  return out;
}

}  // namespace

// A checkpoint is read back from disk, where it may have been damaged or edited: whatever
// parsing it throws is an error (util/guarded_parse.h).
Result<CheckpointContents> LoadCheckpoint(const std::string& checkpoint_dir) {
  return GuardedParse(checkpoint_dir, [&] { return LoadCheckpointUnguarded(checkpoint_dir); });
}

}  // namespace gk::train
