#include "formats/orbax/orbax.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <new>
#include <optional>
#include <set>

#include "formats/orbax/file_set.h"
#include "formats/orbax/ocdbt.h"
#include "formats/orbax/zarr.h"
#include "util/atomic_file.h"
#include "util/guarded_parse.h"

namespace gk::orbax {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kTmpSuffix = ".orbax-checkpoint-tmp";
constexpr uint64_t kMaxMetadataBytes = 16u << 20;  // a .zarray / zarr.json value
constexpr const char* kV0PyTreeHandler =
    "orbax.checkpoint._src.handlers.pytree_checkpoint_handler.PyTreeCheckpointHandler";
constexpr const char* kV1PyTreeHandler =
    "orbax.checkpoint.experimental.v1._src.handlers.pytree_handler.PyTreeHandler";

bool Exists(const std::string& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

bool IsDir(const std::string& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

Result<json> ReadJsonFile(const std::string& path) {
  GK_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return ParseJson(text, path);
}

std::vector<std::string> SplitDots(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t dot = s.find('.', start);
    out.push_back(s.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return out;
}

std::string JoinDots(const std::vector<std::string>& keys) {
  std::string s;
  for (size_t i = 0; i < keys.size(); ++i) s += (i ? "." : "") + keys[i];
  return s;
}

// The step number in a directory name: "23", "0023", "step_23" (Orbax's NameFormat); -1 if none.
int64_t ParseStepName(const std::string& name) {
  if (name.find(kTmpSuffix) != std::string::npos) return -1;
  std::string digits = name;
  const size_t us = name.rfind('_');
  if (us != std::string::npos) digits = name.substr(us + 1);
  if (digits.empty() || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::stoll(digits);
}

Status FsyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::Error(StrCat(dir, ": cannot open directory: ", std::strerror(errno)));
  const int r = ::fsync(fd);
  ::close(fd);
  if (r != 0) return Status::Error(StrCat(dir, ": fsync failed: ", std::strerror(errno)));
  return Status::Ok();
}

Status RenameDir(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return Status::Error(StrCat("rename ", from, " -> ", to, ": ", std::strerror(errno)));
  }
  return FsyncDir(fs::path(to).parent_path().string());
}

uint64_t NowNs() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::system_clock::now().time_since_epoch()).count());
}

std::string Base64Url(const std::string& s) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  size_t i = 0;
  for (; i + 2 < s.size(); i += 3) {
    const uint32_t v = uint32_t(uint8_t(s[i])) << 16 | uint32_t(uint8_t(s[i + 1])) << 8 | uint8_t(s[i + 2]);
    for (int k = 3; k >= 0; --k) out.push_back(kAlphabet[(v >> (6 * k)) & 63]);
  }
  if (i + 1 == s.size()) {
    const uint32_t v = uint32_t(uint8_t(s[i])) << 16;
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out += "==";
  } else if (i + 2 == s.size()) {
    const uint32_t v = uint32_t(uint8_t(s[i])) << 16 | uint32_t(uint8_t(s[i + 1])) << 8;
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(kAlphabet[(v >> 6) & 63]);
    out += "=";
  }
  return out;
}

// Orders tree paths as JAX flattens them: key by key, integer-looking keys numerically.
bool PathLess(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  const auto is_num = [](const std::string& s) {
    return !s.empty() && s.size() < 19 && s.find_first_not_of("0123456789") == std::string::npos;
  };
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (a[i] == b[i]) continue;
    if (is_num(a[i]) && is_num(b[i])) return std::stoll(a[i]) < std::stoll(b[i]);
    return a[i] < b[i];
  }
  return a.size() < b.size();
}

// Array directories of the plain-zarr layout: any directory holding .zarray or zarr.json,
// named by its path relative to the item (Orbax's param names are dotted, so one level;
// array_metadatas/ and the like hold no such file and add nothing).
void FindZarrDirs(const std::string& root, const std::string& rel, int depth,
                  std::vector<std::pair<std::string, int>>* out) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root + (rel.empty() ? "" : "/" + rel), ec)) {
    if (!e.is_directory(ec)) continue;
    const std::string name = e.path().filename().string();
    if (name.find(kTmpSuffix) != std::string::npos) continue;
    const std::string sub = rel.empty() ? name : rel + "/" + name;
    const std::string full = root + "/" + sub;
    if (Exists(full + "/.zarray")) {
      out->push_back({sub, 2});
    } else if (Exists(full + "/zarr.json")) {
      out->push_back({sub, 3});
    } else if (depth < 8) {
      FindZarrDirs(root, sub, depth + 1, out);
    }
  }
}

}  // namespace

// ---- Item ----

int64_t ArrayInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

struct Item::Impl {
  std::string dir;
  json tree_metadata;
  bool ocdbt = false;
  FileSet files;
  std::map<std::string, StoredValue> kv;  // OCDBT keys, or paths relative to dir (plain zarr)
  std::vector<ArrayInfo> arrays;
  std::vector<zarr::ArrayMeta> metas;  // parallel to arrays
  std::map<std::string, size_t> index;

  Status Load(const OpenOptions& o);
  Status AddPlainArray(const std::string& name);
};

Item::Item(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Item::~Item() = default;

const std::string& Item::dir() const { return impl_->dir; }
const std::vector<ArrayInfo>& Item::arrays() const { return impl_->arrays; }
const nlohmann::json& Item::tree_metadata() const { return impl_->tree_metadata; }
bool Item::ocdbt() const { return impl_->ocdbt; }
int Item::zarr_format() const { return impl_->metas.empty() ? 0 : impl_->metas.front().zarr_format; }

const ArrayInfo* Item::Find(const std::string& name) const {
  auto it = impl_->index.find(name);
  return it == impl_->index.end() ? nullptr : &impl_->arrays[it->second];
}

Result<std::unique_ptr<Item>> Item::Open(const std::string& item_dir) { return Open(item_dir, OpenOptions{}); }

// A checkpoint is outside input: whatever parsing its metadata, OCDBT nodes and zarr chunks
// throws is an error naming it (util/guarded_parse.h), in Open and in Read alike.
Result<std::unique_ptr<Item>> Item::Open(const std::string& item_dir, const OpenOptions& o) {
  return GuardedParse(item_dir, [&]() -> Result<std::unique_ptr<Item>> {
    auto impl = std::make_unique<Impl>();
    impl->dir = item_dir;
    while (impl->dir.size() > 1 && impl->dir.back() == '/') impl->dir.pop_back();
    GK_RETURN_IF_ERROR(impl->Load(o));
    return std::unique_ptr<Item>(new Item(std::move(impl)));
  });
}

// Registers every file under <dir>/<name> as a key "<name>/<relative path>".
Status Item::Impl::AddPlainArray(const std::string& name) {
  std::error_code ec;
  const std::string root = dir + "/" + name;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    const std::string rel = fs::relative(it->path(), root, ec).generic_string();
    if (rel.find(".tmp.") != std::string::npos) continue;  // an unfinished atomic write
    StoredValue v;
    v.file = files.Add(it->path().string());
    v.offset = 0;
    v.length = uint64_t(it->file_size(ec));
    kv.emplace(name + "/" + rel, std::move(v));
  }
  if (ec) return Status::Error(StrCat(root, ": cannot list: ", ec.message()));
  return Status::Ok();
}

Status Item::Impl::Load(const OpenOptions& o) {
  if (!IsDir(dir)) {
    return Status::Error(StrCat(dir, ": ", Exists(dir) ? "not a directory" : "does not exist"));
  }
  const std::string meta_path = dir + "/_METADATA";
  std::optional<bool> use_ocdbt;
  if (Exists(meta_path)) {
    GK_ASSIGN_OR_RETURN(tree_metadata, ReadJsonFile(meta_path));
    if (!tree_metadata.is_object()) return Status::Error(StrCat(meta_path, ": must be a JSON object"));
    if (auto it = tree_metadata.find("use_ocdbt"); it != tree_metadata.end() && it->is_boolean()) {
      use_ocdbt = it->get<bool>();
    }
  }
  // The key-value store: root OCDBT database, unmerged per-process ones, or plain files.
  std::vector<std::string> process_dbs;
  {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("ocdbt.process_", 0) == 0 && Exists(e.path().string() + "/manifest.ocdbt")) {
        process_dbs.push_back(name);
      }
    }
    std::sort(process_dbs.begin(), process_dbs.end());
  }
  std::vector<std::pair<std::string, int>> zarr_arrays;  // (param name, zarr format)
  if (Exists(dir + "/manifest.ocdbt")) {
    ocdbt = true;
    GK_RETURN_IF_ERROR(ocdbt::ReadDatabase(dir, &files, &kv));
  } else if (!process_dbs.empty()) {
    if (!o.read_unmerged_process_databases) {
      return Status::Error(StrCat(dir, ": manifest.ocdbt is missing: the per-process OCDBT databases (",
                                  process_dbs.front(), ", ...) were never merged into a root database, "
                                  "so Orbax cannot restore this item either (OpenOptions::"
                                  "read_unmerged_process_databases reads their union)"));
    }
    ocdbt = true;
    for (const std::string& p : process_dbs) {
      GK_RETURN_IF_ERROR(ocdbt::ReadDatabase(dir + "/" + p, &files, &kv).Wrap(StrCat(dir, ": union of ", p)));
    }
  } else if (use_ocdbt.value_or(false)) {
    return Status::Error(StrCat(dir, ": manifest.ocdbt is missing although _METADATA says use_ocdbt: the item "
                                "is incomplete"));
  } else {
    FindZarrDirs(dir, "", 0, &zarr_arrays);
    for (const auto& [name, format] : zarr_arrays) GK_RETURN_IF_ERROR(AddPlainArray(name));
  }
  if (ocdbt) {
    for (const auto& [key, v] : kv) {
      if (key.size() > 8 && key.compare(key.size() - 8, 8, "/.zarray") == 0) {
        zarr_arrays.push_back({key.substr(0, key.size() - 8), 2});
      } else if (key.size() > 10 && key.compare(key.size() - 10, 10, "/zarr.json") == 0) {
        zarr_arrays.push_back({key.substr(0, key.size() - 10), 3});
      }
    }
  }
  if (tree_metadata.is_null() && zarr_arrays.empty() && !ocdbt) {
    return Status::Error(StrCat(dir, ": not an Orbax PyTree item (no _METADATA, manifest.ocdbt, "
                                "ocdbt.process_* or zarr arrays)"));
  }
  std::map<std::string, int> formats;
  for (const auto& [name, format] : zarr_arrays) {
    auto [it, fresh] = formats.emplace(name, format);
    if (!fresh) return Status::Error(StrCat(dir, ": array '", name, "' has both a .zarray and a zarr.json"));
  }

  // Leaves from _METADATA (with their key paths); arrays only the store knows keep a path
  // split from their dotted name.
  std::map<std::string, ArrayInfo> infos;
  if (!tree_metadata.is_null()) {
    auto tm = tree_metadata.find("tree_metadata");
    if (tm != tree_metadata.end() && !tm->is_null()) {
      if (!tm->is_object()) return Status::Error(StrCat(meta_path, ": \"tree_metadata\" must be an object"));
      for (const auto& [tuple_key, entry] : tm->items()) {
        const std::string where = StrCat(meta_path, ": entry ", tuple_key);
        if (!entry.is_object()) return Status::Error(StrCat(where, " must be an object"));
        auto km = entry.find("key_metadata");
        if (km == entry.end() || !km->is_array()) return Status::Error(StrCat(where, " has no key_metadata list"));
        ArrayInfo info;
        for (const json& k : *km) {
          const json* key = k.is_object() && k.contains("key") ? &k["key"] : nullptr;
          if (key == nullptr || !(key->is_string() || key->is_number_integer())) {
            return Status::Error(StrCat(where, ": key_metadata entry ", k.dump(), " has no string or integer \"key\""));
          }
          info.path.push_back(key->is_string() ? key->get<std::string>() : std::to_string(key->get<int64_t>()));
          const json* kt = k.contains("key_type") ? &k["key_type"] : nullptr;
          info.key_types.push_back(kt != nullptr && kt->is_number_integer() ? kt->get<int>() : 2);
        }
        std::string value_type;
        bool skip = false;
        if (auto vm = entry.find("value_metadata"); vm != entry.end() && vm->is_object()) {
          if (auto vt = vm->find("value_type"); vt != vm->end() && vt->is_string()) value_type = vt->get<std::string>();
          if (auto sd = vm->find("skip_deserialize"); sd != vm->end() && sd->is_boolean()) skip = sd->get<bool>();
        }
        static const std::set<std::string> kNotArrays = {"Dict", "List", "Tuple", "NamedTuple", "None", "string"};
        if (skip || kNotArrays.count(value_type) > 0 || info.path.empty()) continue;
        info.name = JoinDots(info.path);
        if (formats.count(info.name) == 0) {
          return Status::Error(StrCat(dir, ": _METADATA lists array '", info.name, "' but the item has no zarr array "
                                      "of that name (no ", info.name, "/.zarray or ", info.name, "/zarr.json",
                                      ocdbt ? " in its OCDBT database)" : " directory)"));
        }
        const std::string name = info.name;
        infos.emplace(name, std::move(info));
      }
    }
  }
  for (const auto& [name, format] : formats) {
    if (infos.count(name) > 0) continue;
    ArrayInfo info;
    info.name = name;
    info.path = SplitDots(name);
    info.key_types.assign(info.path.size(), 2);
    infos.emplace(name, std::move(info));
  }

  for (auto& [name, info] : infos) {
    const int format = formats.at(name);
    const std::string key = name + (format == 2 ? "/.zarray" : "/zarr.json");
    const std::string where = StrCat(dir, ": array '", name, "' (", key, ")");
    const StoredValue& v = kv.at(key);
    if (v.size() > kMaxMetadataBytes) return Status::Error(StrCat(where, ": metadata of ", v.size(), " bytes is too large"));
    std::string text(size_t(v.size()), '\0');
    GK_RETURN_IF_ERROR(ReadValue(files, v, 0, v.size(), text.data()).Wrap(where));
    auto meta = zarr::ParseMetadata(text, format);
    if (!meta.ok()) return meta.status().Wrap(where);
    info.dtype = meta->dtype;
    info.shape = meta->shape;
    info.stored_dtype = meta->dtype_name;
    info.chunk_shape = meta->chunk_shape;
    index.emplace(name, arrays.size());
    arrays.push_back(std::move(info));
    metas.push_back(std::move(meta).value());
  }
  return Status::Ok();
}

Status Item::Read(const ArrayInfo& a, void* dst) const {
  auto it = impl_->index.find(a.name);
  if (it == impl_->index.end()) return Status::Error(StrCat(impl_->dir, ": no array named '", a.name, "'"));
  const zarr::ArrayMeta& m = impl_->metas[it->second];
  const auto& kv = impl_->kv;
  const zarr::GetValueFn get = [&kv](const std::string& key) -> const StoredValue* {
    auto f = kv.find(key);
    return f == kv.end() ? nullptr : &f->second;
  };
  const std::string where = StrCat(impl_->dir, ": array '", a.name, "'");
  return GuardedParse(where, [&] {
    return zarr::ReadArray(m, a.name + "/", impl_->files, get, static_cast<uint8_t*>(dst)).Wrap(where);
  });
}

// ---- Steps ----

namespace {

Result<StepInfo> OpenStepUnguarded(const std::string& step_dir) {
  using R = Result<StepInfo>;
  StepInfo s;
  s.dir = step_dir;
  while (s.dir.size() > 1 && s.dir.back() == '/') s.dir.pop_back();
  if (!IsDir(s.dir)) return R::Error(StrCat(s.dir, ": ", Exists(s.dir) ? "not a directory" : "does not exist"));
  const std::string name = fs::path(s.dir).filename().string();
  if (name.find(kTmpSuffix) != std::string::npos) {
    return R::Error(StrCat(s.dir, ": a temporary directory of a save that did not finish; it is not a checkpoint"));
  }
  s.step = ParseStepName(name);
  const std::string cm = s.dir + "/_CHECKPOINT_METADATA";
  if (Exists(cm)) {
    GK_ASSIGN_OR_RETURN(s.checkpoint_metadata, ReadJsonFile(cm));
    if (!s.checkpoint_metadata.is_object()) return R::Error(StrCat(cm, ": must be a JSON object"));
  }
  s.v1_layout = Exists(s.dir + "/orbax.checkpoint");
  const auto is_pytree_dir = [](const std::string& d) {
    if (Exists(d + "/_METADATA") || Exists(d + "/manifest.ocdbt")) return true;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(d, ec)) {
      if (e.path().filename().string().rfind("ocdbt.process_", 0) == 0) return true;
    }
    return false;
  };
  if (is_pytree_dir(s.dir)) {  // a direct save: the step directory is the item
    s.items = {"."};
    s.pytree_items = {"."};
    return s;
  }
  const json* handlers = nullptr;
  if (s.checkpoint_metadata.is_object()) {
    auto it = s.checkpoint_metadata.find("item_handlers");
    if (it != s.checkpoint_metadata.end() && it->is_object()) handlers = &*it;
  }
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(s.dir, ec)) {
    if (!e.is_directory(ec)) continue;
    const std::string item = e.path().filename().string();
    if (item.find(kTmpSuffix) != std::string::npos || item.empty() || item[0] == '.') continue;
    s.items.push_back(item);
  }
  if (ec) return R::Error(StrCat(s.dir, ": cannot list: ", ec.message()));
  std::sort(s.items.begin(), s.items.end());
  for (const std::string& item : s.items) {
    std::string handler;
    if (handlers != nullptr) {
      auto h = handlers->find(item);
      if (h != handlers->end() && h->is_string()) handler = h->get<std::string>();
    }
    bool pytree;
    if (!handler.empty()) {
      pytree = handler.find("PyTree") != std::string::npos || handler.find("StandardCheckpointHandler") != std::string::npos;
    } else {
      pytree = is_pytree_dir(s.ItemDir(item));
    }
    if (pytree) s.pytree_items.push_back(item);
  }
  return s;
}

}  // namespace

Result<StepInfo> OpenStep(const std::string& step_dir) {
  return GuardedParse(step_dir, [&] { return OpenStepUnguarded(step_dir); });
}

Result<std::vector<int64_t>> ListSteps(const std::string& root) {
  using R = Result<std::vector<int64_t>>;
  if (!IsDir(root)) return R::Error(StrCat(root, ": ", Exists(root) ? "not a directory" : "does not exist"));
  std::map<int64_t, std::string> steps;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    if (!e.is_directory(ec)) continue;
    const std::string name = e.path().filename().string();
    const int64_t step = ParseStepName(name);
    if (step < 0) continue;
    auto [it, fresh] = steps.emplace(step, name);
    if (!fresh) {
      return R::Error(StrCat(root, ": directories '", it->second, "' and '", name, "' both hold step ", step));
    }
  }
  if (ec) return R::Error(StrCat(root, ": cannot list: ", ec.message()));
  std::vector<int64_t> out;
  for (const auto& [step, name] : steps) out.push_back(step);
  return out;
}

Result<std::string> StepDir(const std::string& root, int64_t step) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    if (e.is_directory(ec) && ParseStepName(e.path().filename().string()) == step) return e.path().string();
  }
  return Result<std::string>::Error(StrCat(root, ": no committed step ", step));
}

Result<nlohmann::json> ReadJsonItem(const std::string& item_dir) {
  for (const char* name : {"data.json", "metadata"}) {
    const std::string p = item_dir + "/" + name;
    if (Exists(p)) return ReadJsonFile(p);
  }
  return Result<json>::Error(StrCat(item_dir, ": not a JSON item (no data.json or metadata file)"));
}

// ---- Writing ----

std::string PythonTupleRepr(const std::vector<std::string>& keys) {
  std::string out = "(";
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string& k = keys[i];
    const char q = (k.find('\'') != std::string::npos && k.find('"') == std::string::npos) ? '"' : '\'';
    if (i > 0) out += ", ";
    out.push_back(q);
    for (unsigned char c : k) {
      if (c == '\\') {
        out += "\\\\";
      } else if (c == uint8_t(q)) {
        out.push_back('\\');
        out.push_back(char(c));
      } else if (c == '\n') {
        out += "\\n";
      } else if (c == '\r') {
        out += "\\r";
      } else if (c == '\t') {
        out += "\\t";
      } else if (c < 0x20 || c == 0x7f) {
        char buf[5];
        std::snprintf(buf, sizeof(buf), "\\x%02x", c);
        out += buf;
      } else {
        out.push_back(char(c));
      }
    }
    out.push_back(q);
  }
  if (keys.size() == 1) out.push_back(',');
  return out + ")";
}

namespace {

struct PreparedArray {
  const ArraySpec* spec;
  std::string name;
  zarr::ArrayMeta meta;
};

// The default chunk shape: the whole array up to max_bytes, else cut along axis 0 (then 1, ...)
// into near-equal pieces of at most max_bytes.
std::vector<int64_t> DefaultChunks(const std::vector<int64_t>& shape, size_t isz, uint64_t max_bytes) {
  std::vector<int64_t> c = shape;
  for (int64_t& d : c) d = std::max<int64_t>(d, 1);
  uint64_t bytes = isz;
  for (int64_t d : c) bytes *= uint64_t(d);
  for (size_t axis = 0; axis < c.size() && bytes > max_bytes; ++axis) {
    const uint64_t per = bytes / uint64_t(c[axis]);  // bytes of one index along this axis
    const uint64_t fit = std::max<uint64_t>(1, max_bytes / per);
    const uint64_t pieces = (uint64_t(c[axis]) + fit - 1) / fit;
    c[axis] = int64_t((uint64_t(c[axis]) + pieces - 1) / pieces);
    bytes = per * uint64_t(c[axis]);
  }
  return c;
}

Result<std::vector<PreparedArray>> Prepare(const std::vector<ArraySpec>& arrays, const WriteOptions& o) {
  using R = Result<std::vector<PreparedArray>>;
  std::vector<PreparedArray> out;
  std::set<std::string> names;
  for (const ArraySpec& a : arrays) {
    const std::string name = JoinDots(a.path);
    const std::string where = StrCat("array '", name, "'");
    if (a.path.empty()) return R::Error("an array has an empty tree path");
    for (const std::string& k : a.path) {
      if (k.empty()) return R::Error(StrCat(where, ": its tree path has an empty key"));
      if (!o.ocdbt && (k.find('/') != std::string::npos || k == "..")) {
        return R::Error(StrCat(where, ": key '", k, "' cannot name a directory in the plain zarr layout"));
      }
    }
    if (!a.key_types.empty() && a.key_types.size() != a.path.size()) {
      return R::Error(StrCat(where, ": ", a.key_types.size(), " key types for ", a.path.size(), " keys"));
    }
    for (int t : a.key_types) {
      if (t != 1 && t != 2) return R::Error(StrCat(where, ": key type ", t, " (1 sequence, 2 dict)"));
    }
    if (!names.insert(name).second) return R::Error(StrCat(where, " is given twice"));
    if (!a.fill) return R::Error(StrCat(where, " has no fill function"));
    std::vector<int64_t> chunks = a.chunk_shape;
    if (chunks.empty()) chunks = DefaultChunks(a.shape, std::max<size_t>(DTypeSize(a.dtype), 1), o.max_chunk_bytes);
    auto meta = zarr::MakeOrbaxMeta(o.zarr_format, a.dtype, a.shape, chunks, o.zstd);
    if (!meta.ok()) return meta.status().Wrap(where);
    out.push_back(PreparedArray{&a, name, std::move(meta).value()});
  }
  std::sort(out.begin(), out.end(),
            [](const PreparedArray& x, const PreparedArray& y) { return PathLess(x.spec->path, y.spec->path); });
  return out;
}

// Fills one array and streams its chunks to `put`.
Status EncodeArray(const PreparedArray& p, const zarr::PutValueFn& put) {
  const uint64_t nbytes = p.meta.nbytes();
  std::unique_ptr<uint8_t[]> buf(new (std::nothrow) uint8_t[size_t(std::max<uint64_t>(nbytes, 1))]);
  if (!buf) return Status::Error(StrCat("array '", p.name, "': cannot allocate ", nbytes, " bytes"));
  GK_RETURN_IF_ERROR(p.spec->fill(buf.get(), size_t(nbytes)).Wrap(StrCat("array '", p.name, "': fill")));
  GK_RETURN_IF_ERROR(put(p.name + (p.meta.zarr_format == 2 ? "/.zarray" : "/zarr.json"), zarr::MetadataJson(p.meta)));
  return zarr::WriteArray(p.meta, p.name + "/", buf.get(), put);
}

Status WriteItemFiles(const std::string& dir, const std::vector<PreparedArray>& arrays, const WriteOptions& o) {
  nlohmann::ordered_json tree = nlohmann::ordered_json::object();
  json sharding = json::object();
  json array_metadatas = json::array();
  for (const PreparedArray& p : arrays) {
    nlohmann::ordered_json keys = nlohmann::ordered_json::array();
    for (size_t i = 0; i < p.spec->path.size(); ++i) {
      const int type = p.spec->key_types.empty() ? 2 : p.spec->key_types[i];
      const std::string& k = p.spec->path[i];
      nlohmann::ordered_json entry;
      const bool numeric = !k.empty() && k.size() < 19 && k.find_first_not_of("0123456789") == std::string::npos;
      if (type == 1 && numeric) {
        entry["key"] = std::stoll(k);  // new Orbax writes sequence indices as integers
      } else {
        entry["key"] = k;
      }
      entry["key_type"] = type;
      keys.push_back(entry);
    }
    nlohmann::ordered_json value;
    value["value_type"] = "jax.Array";
    value["skip_deserialize"] = false;
    value["write_shape"] = p.meta.shape;
    nlohmann::ordered_json e;
    e["key_metadata"] = keys;
    e["value_metadata"] = value;
    tree[PythonTupleRepr(p.spec->path)] = e;
    sharding[Base64Url(p.name)] = R"({"sharding_type": "SingleDeviceSharding", "device_str": "cpu:0"})";
    array_metadatas.push_back({{"array_metadata",
                                {{"param_name", p.name}, {"write_shape", p.meta.shape},
                                 {"chunk_shape", p.meta.chunk_shape}, {"ext_metadata", nullptr}}}});
  }
  nlohmann::ordered_json meta;
  meta["tree_metadata"] = tree;
  meta["use_ocdbt"] = o.ocdbt;
  meta["use_zarr3"] = o.zarr_format == 3;
  meta["store_array_data_equal_to_fill_value"] = true;
  meta["custom_metadata"] = nullptr;
  GK_RETURN_IF_ERROR(WriteFileAtomic(dir + "/_METADATA", meta.dump()));
  GK_RETURN_IF_ERROR(WriteFileAtomic(dir + "/_sharding", sharding.dump()));
  std::error_code ec;
  fs::create_directories(dir + "/array_metadatas", ec);
  if (ec) return Status::Error(StrCat(dir, "/array_metadatas: cannot create: ", ec.message()));
  return WriteFileAtomic(dir + "/array_metadatas/process_0", json{{"array_metadatas", array_metadatas}}.dump());
}

Status WriteItemInto(const std::string& tmp, const std::vector<PreparedArray>& arrays, const WriteOptions& o) {
  if (o.ocdbt) {
    ocdbt::WriterOptions wo;
    wo.zstd_nodes = o.zstd;
    wo.max_node_entries = o.max_btree_node_entries;
    GK_ASSIGN_OR_RETURN(auto db, ocdbt::DatabaseWriter::Create(tmp, wo));
    const zarr::PutValueFn put = [&db](std::string key, std::string_view value) { return db->Put(std::move(key), value); };
    for (const PreparedArray& p : arrays) GK_RETURN_IF_ERROR(EncodeArray(p, put));
    GK_RETURN_IF_ERROR(db->Commit());
  } else {
    const zarr::PutValueFn put = [&tmp](std::string key, std::string_view value) -> Status {
      const std::string path = tmp + "/" + key;
      std::error_code ec;
      fs::create_directories(fs::path(path).parent_path(), ec);
      if (ec) return Status::Error(StrCat(fs::path(path).parent_path().string(), ": cannot create: ", ec.message()));
      return WriteFileAtomic(path, value);
    };
    for (const PreparedArray& p : arrays) GK_RETURN_IF_ERROR(EncodeArray(p, put));
  }
  return WriteItemFiles(tmp, arrays, o);
}

Status MakeFreshDir(const std::string& dir) {
  std::error_code ec;
  fs::remove_all(dir, ec);  // a stale temporary directory of a crashed save
  if (ec) return Status::Error(StrCat(dir, ": cannot remove the stale temporary directory: ", ec.message()));
  fs::create_directories(dir, ec);
  if (ec) return Status::Error(StrCat(dir, ": cannot create: ", ec.message()));
  return Status::Ok();
}

Status CheckOptions(const WriteOptions& o) {
  if (o.zarr_format != 2 && o.zarr_format != 3) return Status::Error(StrCat("zarr_format must be 2 or 3, not ", o.zarr_format));
  if (o.max_chunk_bytes == 0) return Status::Error("max_chunk_bytes must be positive");
  return Status::Ok();
}

}  // namespace

Status WriteItem(const std::string& item_dir, const std::vector<ArraySpec>& arrays, const WriteOptions& o) {
  GK_RETURN_IF_ERROR(CheckOptions(o));
  std::string dir = item_dir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (Exists(dir)) return Status::Error(StrCat(dir, ": already exists; an Orbax item is written into a new directory"));
  GK_ASSIGN_OR_RETURN(std::vector<PreparedArray> prepared, Prepare(arrays, o));
  const std::string tmp = dir + kTmpSuffix;
  GK_RETURN_IF_ERROR(MakeFreshDir(tmp));
  Status st = WriteItemInto(tmp, prepared, o);
  if (st.ok()) st = FsyncDir(tmp);
  if (st.ok()) st = RenameDir(tmp, dir);
  if (!st.ok()) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    return st.Wrap(StrCat("writing Orbax item ", dir));
  }
  return Status::Ok();
}

Status WriteStep(const std::string& root, int64_t step,
                 const std::vector<std::pair<std::string, std::vector<ArraySpec>>>& items, const WriteOptions& o) {
  GK_RETURN_IF_ERROR(CheckOptions(o));
  if (step < 0) return Status::Error(StrCat("step must be non-negative, not ", step));
  std::set<std::string> names;
  for (const auto& [name, arrays] : items) {
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos ||
        name.find(kTmpSuffix) != std::string::npos) {
      return Status::Error(StrCat("invalid item name '", name, "'"));
    }
    if (!names.insert(name).second) return Status::Error(StrCat("item '", name, "' is given twice"));
  }
  std::error_code ec;
  fs::create_directories(root, ec);
  if (ec) return Status::Error(StrCat(root, ": cannot create: ", ec.message()));
  const std::string final_dir = StrCat(root, "/", step);
  if (Exists(final_dir)) return Status::Error(StrCat(final_dir, ": step ", step, " already exists"));
  const std::string tmp = final_dir + kTmpSuffix;
  GK_RETURN_IF_ERROR(MakeFreshDir(tmp));
  const auto run = [&]() -> Status {
    const char* handler = o.zarr_format == 3 ? kV1PyTreeHandler : kV0PyTreeHandler;
    nlohmann::ordered_json cm;
    nlohmann::ordered_json handlers = nlohmann::ordered_json::object();
    for (const auto& [name, arrays] : items) handlers[name] = handler;
    cm["item_handlers"] = handlers;
    cm["metrics"] = json::object();
    cm["performance_metrics"] = json::object();
    cm["init_timestamp_nsecs"] = NowNs();
    cm["commit_timestamp_nsecs"] = nullptr;
    cm["custom_metadata"] = o.custom_metadata.is_null() ? json::object() : o.custom_metadata;
    GK_RETURN_IF_ERROR(WriteFileAtomic(tmp + "/_CHECKPOINT_METADATA", cm.dump()));
    for (const auto& [name, arrays] : items) GK_RETURN_IF_ERROR(WriteItem(tmp + "/" + name, arrays, o));
    // The v1 marker only for zarr3 (what the v1 API writes); zarr v2 mirrors the v0
    // CheckpointManager, which has none.
    if (o.zarr_format == 3) GK_RETURN_IF_ERROR(WriteFileAtomic(tmp + "/orbax.checkpoint", ""));
    cm["commit_timestamp_nsecs"] = NowNs();
    GK_RETURN_IF_ERROR(WriteFileAtomic(tmp + "/_CHECKPOINT_METADATA", cm.dump()));
    GK_RETURN_IF_ERROR(WriteFileAtomic(tmp + "/commit_success.txt",
                                       StrCat("Checkpoint commit was successful to ", final_dir)));
    GK_RETURN_IF_ERROR(FsyncDir(tmp));
    return RenameDir(tmp, final_dir);
  };
  Status st = run();
  if (!st.ok()) {
    fs::remove_all(tmp, ec);
    return st.Wrap(StrCat("writing Orbax step ", final_dir));
  }
  return Status::Ok();
}

}  // namespace gk::orbax
