#include "formats/token_dataset.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2, RENAME_EXCHANGE (glibc >= 2.28)
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>

#include "formats/safetensors.h"
#include "util/atomic_file.h"
#include "util/guarded_parse.h"

namespace gk {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr char kFormat[] = "gemmakit-token-dataset";
constexpr int kVersion = 1;
constexpr char kIndexName[] = "dataset.json";
constexpr char kRedo[] = "; the data set is damaged: write it again with `gemmakit data prepare`";

std::string Errno() { return std::strerror(errno); }

std::string ShardName(size_t i) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "shard-%05zu.safetensors", i);
  return buf;
}


Status RemoveTree(const fs::path& p) {
  std::error_code ec;
  fs::remove_all(p, ec);
  if (ec) return Status::Error(StrCat("cannot remove ", p.string(), ": ", ec.message()));
  return Status::Ok();
}


Status CheckRow(const TokenRow& row, size_t i) {
  if (row.tokens.empty()) return Status::Error(StrCat("row ", i, " is empty; every row needs at least one token"));
  if (row.loss_mask.size() != row.tokens.size()) {
    return Status::Error(StrCat("row ", i, " has ", row.tokens.size(), " tokens but ", row.loss_mask.size(),
                                " loss-mask entries; they must be the same length"));
  }
  if (row.loss_mask[0] != 0) {
    return Status::Error(StrCat("row ", i, ": loss_mask[0] is ", int(row.loss_mask[0]),
                                "; nothing predicts the first token, so it must be 0"));
  }
  for (size_t t = 0; t < row.tokens.size(); ++t) {
    if (row.tokens[t] < 0) return Status::Error(StrCat("row ", i, ": token ", t, " has negative id ", row.tokens[t]));
    if (row.loss_mask[t] > 1) {
      return Status::Error(StrCat("row ", i, ": loss_mask[", t, "] is ", int(row.loss_mask[t]), "; it must be 0 or 1"));
    }
  }
  return Status::Ok();
}

// Only a directory that holds nothing but a token data set's files may be replaced, so a wrong
// --out (a home directory, a checkpoint) is refused instead of deleted.
Status CheckReplaceable(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return Status::Error(StrCat(dir.string(), " exists and is not a directory; choose another output path"));
  }
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    const bool ours = name == kIndexName || (name.starts_with("shard-") && name.ends_with(".safetensors")) ||
                      name.find(".tmp.") != std::string::npos;  // AtomicFile leftovers of a killed write
    if (!ours || !e.is_regular_file()) {
      return Status::Error(StrCat(dir.string(), " exists and holds ", name,
                                  ", which is not part of a token data set; refusing to replace it (choose a new "
                                  "output directory or remove it)"));
    }
  }
  if (ec) return Status::Error(StrCat("cannot list ", dir.string(), ": ", ec.message()));
  return Status::Ok();
}

// Puts the finished tmp directory at `dir`. An existing one is swapped out in one atomic
// renameat2(RENAME_EXCHANGE), so DIR always names a complete data set; file systems without it
// get the old one renamed aside first. `old_out` names what to remove afterwards.
Status MoveIntoPlace(const fs::path& tmp, const fs::path& dir, fs::path* old_out) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(dir, ec))) {
    if (::rename(tmp.c_str(), dir.c_str()) != 0) {
      return Status::Error(StrCat("rename ", tmp.string(), " -> ", dir.string(), ": ", Errno()));
    }
    return Status::Ok();
  }
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
    *old_out = tmp;
    return Status::Ok();
  }
  if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP) {
    return Status::Error(StrCat("exchanging ", tmp.string(), " and ", dir.string(), ": ", Errno()));
  }
  const fs::path aside = dir.string() + ".old-" + std::to_string(::getpid());
  GK_RETURN_IF_ERROR(RemoveTree(aside));
  if (::rename(dir.c_str(), aside.c_str()) != 0) {
    return Status::Error(StrCat("rename ", dir.string(), " -> ", aside.string(), ": ", Errno()));
  }
  if (::rename(tmp.c_str(), dir.c_str()) != 0) {
    return Status::Error(StrCat("rename ", tmp.string(), " -> ", dir.string(), ": ", Errno()));
  }
  *old_out = aside;
  return Status::Ok();
}

Status WriteShard(const std::string& path, const std::vector<TokenRow>& rows, size_t begin, size_t end,
                  int64_t* tokens_out, int64_t* loss_out) {
  // Concatenated once so that each fill is one copy.
  std::vector<int32_t> tokens;
  std::vector<uint8_t> mask;
  std::vector<int64_t> offsets{0};
  for (size_t i = begin; i < end; ++i) {
    tokens.insert(tokens.end(), rows[i].tokens.begin(), rows[i].tokens.end());
    mask.insert(mask.end(), rows[i].loss_mask.begin(), rows[i].loss_mask.end());
    offsets.push_back(int64_t(tokens.size()));
  }
  for (uint8_t m : mask) *loss_out += m;
  *tokens_out += int64_t(tokens.size());
  auto copy_from = [](const void* src) {
    return [src](uint8_t* dst, size_t n) {
      std::memcpy(dst, src, n);
      return Status::Ok();
    };
  };
  const std::vector<TensorSpec> specs = {
      {"tokens", DType::kI32, {int64_t(tokens.size())}, copy_from(tokens.data())},
      {"loss_mask", DType::kU8, {int64_t(mask.size())}, copy_from(mask.data())},
      {"offsets", DType::kI64, {int64_t(offsets.size())}, copy_from(offsets.data())},
  };
  return WriteSafetensors(path, specs, {{"format", kFormat}});
}

Result<json> ReadIndex(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    return Result<json>::Error(
        StrCat(path.string(), " not found; is this a directory written by `gemmakit data prepare`?"));
  }
  GK_ASSIGN_OR_RETURN(std::string text, ReadFile(path.string()));
  auto parsed = ParseJson(text, path.string());
  if (!parsed.ok()) return Result<json>::Error(StrCat(parsed.message(), kRedo));
  json j = std::move(parsed).value();
  if (!j.is_object()) return Result<json>::Error(StrCat(path.string(), ": must be a JSON object, got ", j.type_name()));
  if (!j.contains("format") || j["format"] != kFormat) {
    return Result<json>::Error(StrCat(path.string(), ": \"format\" is ", j.value("format", json()).dump(),
                                      ", expected \"", kFormat, "\"", kRedo));
  }
  if (!j.contains("version") || j["version"] != kVersion) {
    return Result<json>::Error(StrCat(path.string(), ": \"version\" is ", j.value("version", json()).dump(),
                                      "; this gemmakit reads version ", kVersion));
  }
  for (const char* key : {"rows", "tokens", "loss_tokens"}) {
    if (!j.contains(key) || !j[key].is_number_integer() || j[key].get<int64_t>() < 0) {
      return Result<json>::Error(StrCat(path.string(), ": \"", key, "\" must be a non-negative integer, got ",
                                        j.value(key, json()).dump(), kRedo));
    }
  }
  if (!j.contains("shards") || !j["shards"].is_array()) {
    return Result<json>::Error(StrCat(path.string(), ": \"shards\" must be an array", kRedo));
  }
  std::set<std::string> files;
  for (size_t i = 0; i < j["shards"].size(); ++i) {
    const json& s = j["shards"][i];
    if (!s.is_object() || !s.contains("file") || !s["file"].is_string() || !s.contains("rows") ||
        !s["rows"].is_number_integer() || s["rows"].get<int64_t>() < 1) {
      return Result<json>::Error(StrCat(path.string(), ": shards[", i,
                                        "] must be {\"file\": name, \"rows\": positive integer}, got ", s.dump(),
                                        kRedo));
    }
    const std::string file = s["file"];
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..") {
      return Result<json>::Error(StrCat(path.string(), ": shards[", i, "].file \"", file,
                                        "\" must be a file name inside the data set directory"));
    }
    if (!files.insert(file).second) {
      return Result<json>::Error(StrCat(path.string(), ": shard file \"", file, "\" is listed twice", kRedo));
    }
  }
  if (j.contains("meta") && !j["meta"].is_object()) {
    return Result<json>::Error(StrCat(path.string(), ": \"meta\" must be an object, got ", j["meta"].type_name()));
  }
  return j;
}

const TensorInfo* FindTensor(const SafetensorsFile& f, const std::string& name) {
  for (const TensorInfo& t : f.tensors()) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Result<const TensorInfo*> Expect1D(const SafetensorsFile& f, const std::string& name, DType dtype) {
  using R = Result<const TensorInfo*>;
  const TensorInfo* t = FindTensor(f, name);
  if (t == nullptr) return R::Error(StrCat(f.path(), ": no tensor \"", name, "\"", kRedo));
  if (t->dtype != dtype || t->shape.size() != 1) {
    std::string shape;
    for (int64_t d : t->shape) shape += StrCat(shape.empty() ? "" : ", ", d);
    return R::Error(StrCat(f.path(), ": tensor \"", name, "\" is ", DTypeName(t->dtype), " [", shape, "], expected ",
                           DTypeName(dtype), " with one dimension", kRedo));
  }
  return t;
}

}  // namespace

Status WriteTokenDataset(const std::string& dir, const std::vector<TokenRow>& rows, const json& meta,
                         int64_t rows_per_shard) {
  if (rows.empty()) return Status::Error(StrCat("writing token data set ", dir, ": no rows to write"));
  if (rows_per_shard < 1) {
    return Status::Error(
        StrCat("writing token data set ", dir, ": rows_per_shard is ", rows_per_shard, ", must be >= 1"));
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    GK_RETURN_IF_ERROR(CheckRow(rows[i], i).Wrap(StrCat("writing token data set ", dir)));
  }
  std::error_code ec;
  fs::path clean = fs::absolute(fs::path(dir), ec).lexically_normal();
  if (ec) return Status::Error(StrCat("writing token data set ", dir, ": ", ec.message()));
  if (clean.filename().empty()) clean = clean.parent_path();  // "out/" -> "out"
  if (fs::exists(fs::symlink_status(clean, ec))) GK_RETURN_IF_ERROR(CheckReplaceable(clean));
  fs::create_directories(clean.parent_path(), ec);
  if (ec) return Status::Error(StrCat("cannot create directory ", clean.parent_path().string(), ": ", ec.message()));

  const fs::path tmp = clean.string() + ".tmp-" + std::to_string(::getpid());
  GK_RETURN_IF_ERROR(RemoveTree(tmp));
  if (!fs::create_directory(tmp, ec) || ec) {
    return Status::Error(StrCat("cannot create ", tmp.string(), ": ", ec ? ec.message() : "it exists already"));
  }
  TmpDirGuard guard(tmp);

  json shards = json::array();
  int64_t tokens = 0, loss_tokens = 0;
  for (size_t begin = 0, i = 0; begin < rows.size(); begin += size_t(rows_per_shard), ++i) {
    const size_t end = std::min(rows.size(), begin + size_t(rows_per_shard));
    const std::string name = ShardName(i);
    GK_RETURN_IF_ERROR(WriteShard((tmp / name).string(), rows, begin, end, &tokens, &loss_tokens));
    shards.push_back({{"file", name}, {"rows", int64_t(end - begin)}});
  }
  const json index = {{"format", kFormat}, {"version", kVersion},   {"rows", int64_t(rows.size())},
                      {"tokens", tokens},  {"loss_tokens", loss_tokens}, {"shards", shards},
                      {"meta", meta.is_null() ? json::object() : meta}};
  GK_RETURN_IF_ERROR(WriteFileAtomic((tmp / kIndexName).string(), index.dump(2) + "\n"));
  GK_RETURN_IF_ERROR(FsyncDir(tmp.string()));

  fs::path old;
  GK_RETURN_IF_ERROR(MoveIntoPlace(tmp, clean, &old));
  guard.Release();
  GK_RETURN_IF_ERROR(FsyncDir(clean.parent_path().string()));
  if (!old.empty()) GK_RETURN_IF_ERROR(RemoveTree(old));
  return Status::Ok();
}

// dataset.json and the shards are outside input: whatever parsing them throws is an error
// (util/guarded_parse.h).
Result<TokenDataset> TokenDataset::Open(const std::string& dir) {
  return GuardedParse(dir, [&] { return OpenUnguarded(dir); });
}

Result<TokenDataset> TokenDataset::OpenUnguarded(const std::string& dir) {
  using R = Result<TokenDataset>;
  const fs::path root(dir);
  const fs::path index_path = root / kIndexName;
  GK_ASSIGN_OR_RETURN(json index, ReadIndex(index_path));

  TokenDataset ds;
  ds.meta_ = index.value("meta", json::object());
  int64_t loss_tokens = 0;
  for (const json& entry : index["shards"]) {
    const std::string path = (root / entry["file"].get<std::string>()).string();
    const int64_t want_rows = entry["rows"];
    GK_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> f, SafetensorsFile::Open(path));
    if (f->tensors().size() != 3) {
      return R::Error(StrCat(path, ": holds ", f->tensors().size(),
                             " tensors; a shard has exactly tokens, loss_mask and offsets", kRedo));
    }
    GK_ASSIGN_OR_RETURN(const TensorInfo* tok, Expect1D(*f, "tokens", DType::kI32));
    GK_ASSIGN_OR_RETURN(const TensorInfo* msk, Expect1D(*f, "loss_mask", DType::kU8));
    GK_ASSIGN_OR_RETURN(const TensorInfo* off, Expect1D(*f, "offsets", DType::kI64));
    const int64_t n = tok->shape[0];
    if (msk->shape[0] != n) {
      return R::Error(StrCat(path, ": loss_mask has ", msk->shape[0], " entries but tokens has ", n, kRedo));
    }
    if (off->shape[0] != want_rows + 1) {
      return R::Error(StrCat(path, ": offsets has ", off->shape[0], " entries (", off->shape[0] - 1, " rows) but ",
                             index_path.string(), " lists ", want_rows, " rows for it", kRedo));
    }
    Shard s;
    s.tokens.resize(size_t(n));
    s.mask.resize(size_t(n));
    s.offsets.resize(size_t(want_rows + 1));
    GK_RETURN_IF_ERROR(f->ReadInto(*tok, s.tokens.data()));
    GK_RETURN_IF_ERROR(f->ReadInto(*msk, s.mask.data()));
    GK_RETURN_IF_ERROR(f->ReadInto(*off, s.offsets.data()));

    if (s.offsets.front() != 0) {
      return R::Error(StrCat(path, ": offsets[0] is ", s.offsets.front(), ", must be 0", kRedo));
    }
    for (int64_t r = 0; r < want_rows; ++r) {
      if (s.offsets[r + 1] <= s.offsets[r]) {
        return R::Error(StrCat(path, ": offsets are not increasing: offsets[", r + 1, "] = ", s.offsets[r + 1],
                               " after offsets[", r, "] = ", s.offsets[r], " (rows must be non-empty)", kRedo));
      }
    }
    if (s.offsets.back() != n) {
      return R::Error(
          StrCat(path, ": the last offset is ", s.offsets.back(), " but the shard has ", n, " tokens", kRedo));
    }
    for (int64_t t = 0; t < n; ++t) {
      if (s.mask[t] > 1) {
        return R::Error(
            StrCat(path, ": loss_mask[", t, "] is ", int(s.mask[t]), "; mask values must be 0 or 1", kRedo));
      }
      if (s.tokens[t] < 0)
        return R::Error(StrCat(path, ": tokens[", t, "] is ", s.tokens[t], ", a negative id", kRedo));
      loss_tokens += s.mask[t];
    }
    for (int64_t r = 0; r < want_rows; ++r) {
      if (s.mask[s.offsets[r]] != 0) {
        return R::Error(
            StrCat(path, ": row ", r, " has loss_mask 1 on its first token, which nothing predicts", kRedo));
      }
      ds.row_shard_.push_back(int32_t(ds.shards_.size()));
      ds.row_local_.push_back(r);
      ds.lengths_.push_back(s.offsets[r + 1] - s.offsets[r]);
    }
    ds.total_tokens_ += n;
    ds.shards_.push_back(std::move(s));
  }
  const int64_t rows = index["rows"], tokens = index["tokens"], want_loss = index["loss_tokens"];
  if (ds.rows() != rows || ds.total_tokens_ != tokens || loss_tokens != want_loss) {
    return R::Error(StrCat(index_path.string(), ": lists ", rows, " rows, ", tokens, " tokens and ", want_loss,
                           " loss tokens, but the shards hold ", ds.rows(), ", ", ds.total_tokens_, " and ",
                           loss_tokens, kRedo));
  }
  ds.total_loss_tokens_ = loss_tokens;
  return ds;
}

TokenRow TokenDataset::Row(int64_t i) const {
  GK_ASSERT(i >= 0 && i < rows());
  const Shard& s = shards_[size_t(row_shard_[size_t(i)])];
  const int64_t r = row_local_[size_t(i)];
  const auto b = s.offsets[size_t(r)], e = s.offsets[size_t(r + 1)];
  TokenRow row;
  row.tokens.assign(s.tokens.begin() + b, s.tokens.begin() + e);
  row.loss_mask.assign(s.mask.begin() + b, s.mask.begin() + e);
  return row;
}

}  // namespace gk
