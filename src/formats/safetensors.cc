#include "formats/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <utility>

#include <nlohmann/json.hpp>

#include "util/atomic_file.h"
#include "util/guarded_parse.h"

namespace gk {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// A real header is a few hundred KB at most; anything bigger is a corrupt length field, and
// refusing it keeps a bad file from making us allocate gigabytes.
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

std::string Errno() { return std::strerror(errno); }

std::string ShapeStr(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += StrCat(i ? ", " : "", shape[i]);
  return s + "]";
}

// pread until n bytes arrive: a single call may return fewer bytes or be interrupted.
Status PreadFull(int fd, void* dst, uint64_t n, uint64_t offset, const std::string& path) {
  auto* p = static_cast<uint8_t*>(dst);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, off_t(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::Error(StrCat(path, ": read of ", n, " bytes at offset ", offset,
                                  " failed: ", Errno()));
    }
    if (r == 0) {
      return Status::Error(StrCat(path, ": unexpected end of file at offset ", offset,
                                  " (", n, " more bytes expected); the file shrank while open"));
    }
    p += r;
    n -= uint64_t(r);
    offset += uint64_t(r);
  }
  return Status::Ok();
}

// Product of the dimensions × element size, rejecting negative dims and overflow.
Result<uint64_t> ByteSize(const std::vector<int64_t>& shape, DType dtype, const std::string& where) {
  uint64_t bytes = DTypeSize(dtype);
  for (int64_t d : shape) {
    if (d < 0) {
      return Result<uint64_t>::Error(
          StrCat(where, " has negative dimension ", d, " in shape ", ShapeStr(shape)));
    }
    if (__builtin_mul_overflow(bytes, uint64_t(d), &bytes)) {
      return Result<uint64_t>::Error(
          StrCat(where, " shape ", ShapeStr(shape), " is too large (byte size overflows 64 bits)"));
    }
  }
  return bytes;
}

// Parses {"dtype": .., "shape": [..], "data_offsets": [b, e]} into an absolute-offset TensorInfo.
Result<TensorInfo> ParseEntry(const std::string& path, const std::string& name, const json& e,
                              uint64_t data_start, uint64_t data_size) {
  using R = Result<TensorInfo>;
  const std::string where = StrCat(path, ": tensor '", name, "'");
  if (!e.is_object()) return R::Error(StrCat(where, " header entry is not a JSON object"));
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!e.contains(key)) return R::Error(StrCat(where, " header entry has no \"", key, "\""));
  }
  TensorInfo info;
  info.name = name;

  const json& dt = e["dtype"];
  if (!dt.is_string()) return R::Error(StrCat(where, " dtype is not a string: ", dt.dump()));
  info.dtype = DTypeFromName(dt.get<std::string>());
  if (info.dtype == DType::kUnknown) {
    return R::Error(StrCat(where, " has unknown dtype \"", dt.get<std::string>(),
                           "\" (supported: F32, BF16, F16, F64, I64, I32, I16, I8, U8, BOOL)"));
  }

  const json& sh = e["shape"];
  if (!sh.is_array()) return R::Error(StrCat(where, " shape is not an array: ", sh.dump()));
  for (const json& d : sh) {
    if (!d.is_number_integer()) {
      return R::Error(StrCat(where, " shape ", sh.dump(), " has a non-integer dimension"));
    }
    info.shape.push_back(d.get<int64_t>());
  }
  GK_ASSIGN_OR_RETURN(uint64_t expected, ByteSize(info.shape, info.dtype, where));

  const json& off = e["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
      !off[1].is_number_unsigned()) {
    return R::Error(StrCat(where, " data_offsets must be two non-negative integers, got ",
                           off.dump()));
  }
  const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
  if (end < begin) {
    return R::Error(StrCat(where, " data_offsets [", begin, ", ", end, "] end before they begin"));
  }
  if (end > data_size) {
    return R::Error(StrCat(where, " data_offsets [", begin, ", ", end,
                           "] extend past the end of the file (data region is ", data_size,
                           " bytes); the file is truncated or corrupt"));
  }
  info.nbytes = end - begin;
  if (info.nbytes != expected) {
    return R::Error(StrCat(where, " has dtype ", DTypeName(info.dtype), " and shape ",
                           ShapeStr(info.shape), ", which is ", expected,
                           " bytes, but data_offsets [", begin, ", ", end, "] span ",
                           info.nbytes, " bytes"));
  }
  info.offset = data_start + begin;
  return info;
}

Status ParseMetadata(const std::string& path, const json& m,
                     std::map<std::string, std::string>* out) {
  if (!m.is_object()) {
    return Status::Error(StrCat(path, ": __metadata__ must be a JSON object of strings, got ",
                                m.type_name()));
  }
  for (const auto& [k, v] : m.items()) {
    if (!v.is_string()) {
      return Status::Error(StrCat(path, ": __metadata__ key '", k, "' must map to a string, got ",
                                  v.dump()));
    }
    (*out)[k] = v.get<std::string>();
  }
  return Status::Ok();
}

// Sorts by offset (file order) and rejects tensors that share bytes. Empty tensors own no
// bytes, so they cannot overlap anything.
Status SortAndCheckOverlap(const std::string& path, std::vector<TensorInfo>* tensors) {
  std::sort(tensors->begin(), tensors->end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.offset != b.offset ? a.offset < b.offset : a.name < b.name;
  });
  const TensorInfo* prev = nullptr;
  for (const TensorInfo& t : *tensors) {
    if (t.nbytes == 0) continue;
    if (prev != nullptr && t.offset < prev->offset + prev->nbytes) {
      return Status::Error(StrCat(path, ": tensors '", prev->name, "' and '", t.name,
                                  "' overlap: their data_offsets share bytes; the file is corrupt"));
    }
    prev = &t;
  }
  return Status::Ok();
}

// ---- Writing ----

// Validates a spec and returns its byte size.
Result<uint64_t> SpecBytes(const TensorSpec& t) {
  const std::string where = StrCat("tensor '", t.name, "'");
  if (t.name.empty() || t.name == "__metadata__") {
    return Result<uint64_t>::Error(StrCat("invalid tensor name '", t.name, "'"));
  }
  if (t.dtype == DType::kUnknown) return Result<uint64_t>::Error(where + " has dtype UNKNOWN");
  if (!t.fill) return Result<uint64_t>::Error(where + " has no fill function");
  return ByteSize(t.shape, t.dtype, where);
}

// Header JSON in the given tensor order, padded with spaces so the data region starts at an
// 8-byte aligned offset (as the official writer does, so mmapped tensors are aligned).
Result<std::string> BuildHeader(const std::vector<const TensorSpec*>& tensors,
                                const std::vector<uint64_t>& sizes,
                                const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t pos = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorSpec& t = *tensors[i];
    if (h.contains(t.name)) {
      return Result<std::string>::Error(StrCat("duplicate tensor name '", t.name, "'"));
    }
    h[t.name] = {{"dtype", std::string(DTypeName(t.dtype))},
                 {"shape", t.shape},
                 {"data_offsets", {pos, pos + sizes[i]}}};
    pos += sizes[i];
  }
  std::string s = h.dump();
  s.append((8 - (8 + s.size()) % 8) % 8, ' ');
  return s;
}

// Writes one file from pointers into the caller's specs (shards reuse the specs uncopied).
Status WriteOne(const std::string& path, const std::vector<const TensorSpec*>& tensors,
                const std::map<std::string, std::string>& metadata) {
  std::vector<uint64_t> sizes;
  for (const TensorSpec* t : tensors) {
    auto size = SpecBytes(*t);
    if (!size.ok()) return size.status().Wrap(path);
    sizes.push_back(*size);
  }
  auto header = BuildHeader(tensors, sizes, metadata);
  if (!header.ok()) return header.status().Wrap(path);

  GK_ASSIGN_OR_RETURN(AtomicFile out, AtomicFile::Create(path));
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(header->size()) >> (8 * i));
  GK_RETURN_IF_ERROR(out.Write(len, 8));
  GK_RETURN_IF_ERROR(out.Write(*header));

  // One buffer sized for the largest tensor so far: peak memory is one tensor, and it is left
  // uninitialised because fill overwrites every byte.
  std::unique_ptr<uint8_t[]> buf;
  uint64_t cap = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (sizes[i] > cap) {
      buf.reset(new uint8_t[sizes[i]]);
      cap = sizes[i];
    }
    Status st = tensors[i]->fill(buf.get(), sizes[i]);
    if (!st.ok()) return st.Wrap(StrCat(path, ": filling tensor '", tensors[i]->name, "'"));
    GK_RETURN_IF_ERROR(out.Write(buf.get(), sizes[i]));
  }
  return out.Commit();
}

std::string ShardName(size_t i, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

}  // namespace

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// ---- SafetensorsFile ----

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(map_, file_size_);
  if (fd_ >= 0) ::close(fd_);
}

// The header is outside input: whatever parsing it throws (nlohmann on a number too large for a
// double, allocation on absurd sizes) becomes an error naming the file, never an abort.
Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  return GuardedParse(path, [&] { return OpenUnguarded(path); });
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::OpenUnguarded(const std::string& path) {
  using R = Result<std::unique_ptr<SafetensorsFile>>;
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f->fd_ < 0) return R::Error(StrCat("cannot open ", path, ": ", Errno()));
  struct stat st;
  if (::fstat(f->fd_, &st) != 0) return R::Error(StrCat("cannot stat ", path, ": ", Errno()));
  if (!S_ISREG(st.st_mode)) return R::Error(StrCat(path, ": not a regular file"));
  f->file_size_ = uint64_t(st.st_size);

  if (f->file_size_ < 8) {
    return R::Error(StrCat(path, ": file is ", f->file_size_,
                           " bytes, too short for the 8-byte header length; the file is empty "
                           "or truncated"));
  }
  uint8_t len_bytes[8];
  GK_RETURN_IF_ERROR(PreadFull(f->fd_, len_bytes, 8, 0, path));
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  if (header_len > f->file_size_ - 8) {
    return R::Error(StrCat(path, ": header length ", header_len,
                           " extends past the end of the file (", f->file_size_ - 8,
                           " bytes follow the length field); the file is truncated or not "
                           "safetensors"));
  }
  if (header_len > kMaxHeaderBytes) {
    return R::Error(StrCat(path, ": header length ", header_len, " exceeds the ", kMaxHeaderBytes,
                           "-byte limit; the file is corrupt or not safetensors"));
  }
  std::string text(header_len, '\0');
  GK_RETURN_IF_ERROR(PreadFull(f->fd_, text.data(), header_len, 8, path));
  GK_ASSIGN_OR_RETURN(json header, ParseJson(text, StrCat(path, ": header")));
  if (!header.is_object()) {
    return R::Error(StrCat(path, ": header must be a JSON object, got ", header.type_name()));
  }

  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = f->file_size_ - data_start;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      GK_RETURN_IF_ERROR(ParseMetadata(path, entry, &f->metadata_));
      continue;
    }
    GK_ASSIGN_OR_RETURN(TensorInfo info, ParseEntry(path, name, entry, data_start, data_size));
    f->tensors_.push_back(std::move(info));
  }
  GK_RETURN_IF_ERROR(SortAndCheckOverlap(path, &f->tensors_));
  return f;
}

Status SafetensorsFile::ReadInto(const TensorInfo& info, void* dst) const {
  if (info.offset + info.nbytes > file_size_ || info.offset + info.nbytes < info.offset) {
    return Status::Error(StrCat(path_, ": tensor '", info.name, "' range [", info.offset, ", ",
                                info.offset + info.nbytes, ") is outside the ", file_size_,
                                "-byte file; the TensorInfo belongs to another file"));
  }
  return PreadFull(fd_, dst, info.nbytes, info.offset, path_)
      .Wrap(StrCat("reading tensor '", info.name, "'"));
}

void SafetensorsFile::Prefetch(const TensorInfo& info) const {
  if (info.offset + info.nbytes <= file_size_) {
    (void)posix_fadvise(fd_, off_t(info.offset), off_t(info.nbytes), POSIX_FADV_WILLNEED);
  }
}

Result<const uint8_t*> SafetensorsFile::Map(const TensorInfo& info) const {
  using R = Result<const uint8_t*>;
  if (info.offset + info.nbytes > file_size_ || info.offset + info.nbytes < info.offset) {
    return R::Error(StrCat(path_, ": tensor '", info.name, "' range [", info.offset, ", ",
                           info.offset + info.nbytes, ") is outside the ", file_size_,
                           "-byte file; the TensorInfo belongs to another file"));
  }
  std::lock_guard<std::mutex> lock(map_mu_);
  if (map_ == nullptr) {
    void* p = ::mmap(nullptr, file_size_, PROT_READ, MAP_PRIVATE, fd_, 0);
    if (p == MAP_FAILED) {
      return R::Error(StrCat(path_, ": mmap of ", file_size_, " bytes failed: ", Errno()));
    }
    map_ = p;
  }
  return static_cast<const uint8_t*>(map_) + info.offset;
}

// ---- SafetensorsSet ----

Status SafetensorsSet::Add(std::unique_ptr<SafetensorsFile> file) {
  const int index = int(files_.size());
  for (TensorInfo& t : file->tensors_) {
    t.file_index = index;
    auto [it, inserted] = index_.emplace(t.name, t);
    if (!inserted) {
      return Status::Error(StrCat("duplicate tensor '", t.name, "': in ",
                                  files_[it->second.file_index]->path(), " and in ",
                                  file->path()));
    }
  }
  files_.push_back(std::move(file));
  return Status::Ok();
}

namespace {

// Reads model.safetensors.index.json into shard file name -> tensor names it should hold.
Result<std::map<std::string, std::vector<std::string>>> ReadIndexUnguarded(const std::string& index_path) {
  using R = Result<std::map<std::string, std::vector<std::string>>>;
  GK_ASSIGN_OR_RETURN(std::string text, ReadFile(index_path));
  GK_ASSIGN_OR_RETURN(json index, ParseJson(text, index_path));
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    return R::Error(StrCat(index_path, ": has no \"weight_map\" object"));
  }
  std::map<std::string, std::vector<std::string>> shards;
  for (const auto& [name, shard] : index["weight_map"].items()) {
    if (!shard.is_string()) {
      return R::Error(StrCat(index_path, ": weight_map entry for tensor '", name,
                             "' must be a file name string, got ", shard.dump()));
    }
    const std::string file = shard.get<std::string>();
    // Shards live beside the index; refuse names that would escape the directory.
    const fs::path p(file);
    if (file.empty() || p.is_absolute() ||
        std::any_of(p.begin(), p.end(), [](const fs::path& c) { return c == ".."; })) {
      return R::Error(StrCat(index_path, ": weight_map entry for tensor '", name,
                             "' names shard '", file, "', which is not a file in this directory"));
    }
    shards[file].push_back(name);
  }
  if (shards.empty()) return R::Error(StrCat(index_path, ": weight_map is empty"));
  return shards;
}

Result<std::map<std::string, std::vector<std::string>>> ReadIndex(const std::string& index_path) {
  return GuardedParse(index_path, [&] { return ReadIndexUnguarded(index_path); });
}

}  // namespace

Result<SafetensorsSet> SafetensorsSet::Open(const std::string& dir_or_file) {
  using R = Result<SafetensorsSet>;
  SafetensorsSet set;
  std::error_code ec;
  const fs::file_status st = fs::status(dir_or_file, ec);
  if (ec || !fs::exists(st)) return R::Error(StrCat(dir_or_file, ": no such file or directory"));

  if (!fs::is_directory(st)) {
    GK_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(dir_or_file));
    GK_RETURN_IF_ERROR(set.Add(std::move(file)));
    return set;
  }

  const fs::path dir(dir_or_file);
  const std::string index_path = (dir / kIndexName).string();
  if (fs::exists(index_path, ec)) {
    GK_ASSIGN_OR_RETURN(auto shards, ReadIndex(index_path));
    for (const auto& [shard, names] : shards) {
      auto file = SafetensorsFile::Open((dir / shard).string());
      if (!file.ok()) {
        return file.status().Wrap(StrCat(index_path, " names shard '", shard, "'"));
      }
      for (const std::string& name : names) {
        const auto& ts = (*file)->tensors();
        if (std::none_of(ts.begin(), ts.end(), [&](const TensorInfo& t) { return t.name == name; })) {
          return R::Error(StrCat(index_path, ": weight_map puts tensor '", name, "' in ", shard,
                                 ", but that shard has no such tensor"));
        }
      }
      GK_RETURN_IF_ERROR(set.Add(std::move(file).value()).Wrap(dir_or_file));
    }
    return set;
  }

  const fs::path single = dir / kSingleName;
  if (fs::exists(single, ec)) {
    GK_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(single.string()));
    GK_RETURN_IF_ERROR(set.Add(std::move(file)));
    return set;
  }

  // No conventional name: take every *.safetensors file, in name order.
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".safetensors" && e.is_regular_file()) found.push_back(e.path());
  }
  if (ec) return R::Error(StrCat("cannot list ", dir_or_file, ": ", ec.message()));
  if (found.empty()) {
    return R::Error(StrCat("no ", kSingleName, " or ", kIndexName, " in ", dir_or_file));
  }
  std::sort(found.begin(), found.end());
  for (const std::string& p : found) {
    GK_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(p));
    GK_RETURN_IF_ERROR(set.Add(std::move(file)).Wrap(dir_or_file));
  }
  return set;
}

const TensorInfo* SafetensorsSet::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &it->second;
}

std::vector<std::string> SafetensorsSet::Names() const {
  std::vector<std::string> names;
  names.reserve(index_.size());
  for (const auto& [name, info] : index_) names.push_back(name);
  return names;
}

Status SafetensorsSet::ReadInto(const TensorInfo& info, void* dst) const {
  if (info.file_index < 0 || size_t(info.file_index) >= files_.size()) {
    return Status::Error(StrCat("tensor '", info.name, "' has file_index ", info.file_index,
                                " but the set has ", files_.size(), " files"));
  }
  return files_[info.file_index]->ReadInto(info, dst);
}

Result<const uint8_t*> SafetensorsSet::Map(const TensorInfo& info) const {
  if (info.file_index < 0 || size_t(info.file_index) >= files_.size()) {
    return Result<const uint8_t*>::Error(StrCat("tensor '", info.name, "' has file_index ",
                                                info.file_index, " but the set has ",
                                                files_.size(), " files"));
  }
  return files_[info.file_index]->Map(info);
}

// ---- Writing ----

Status WriteSafetensors(const std::string& path, const std::vector<TensorSpec>& tensors,
                        const std::map<std::string, std::string>& metadata) {
  std::vector<const TensorSpec*> ptrs;
  for (const TensorSpec& t : tensors) ptrs.push_back(&t);
  return WriteOne(path, ptrs, metadata);
}

Status WriteSafetensorsDir(const std::string& dir, const std::vector<TensorSpec>& tensors,
                           uint64_t max_shard_bytes,
                           const std::map<std::string, std::string>& metadata,
                           const std::function<void(const std::string&)>& on_file) {
  // Greedy packing in the given order; a tensor larger than the limit gets a shard to itself.
  std::vector<std::vector<const TensorSpec*>> shards(1);
  uint64_t shard_bytes = 0, total = 0;
  std::set<std::string> seen;  // names must be unique across shards, not just within one
  for (const TensorSpec& t : tensors) {
    auto size = SpecBytes(t);
    if (!size.ok()) return size.status().Wrap(dir);
    if (!seen.insert(t.name).second) {
      return Status::Error(StrCat(dir, ": duplicate tensor name '", t.name, "'"));
    }
    if (!shards.back().empty() && shard_bytes + *size > max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(&t);
    shard_bytes += *size;
    total += *size;
  }

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::Error(StrCat("cannot create directory ", dir, ": ", ec.message()));
  const fs::path d(dir);

  if (shards.size() == 1) {
    GK_RETURN_IF_ERROR(WriteOne((d / kSingleName).string(), shards[0], metadata));
    if (on_file) on_file((d / kSingleName).string());
    // A leftover index from an earlier sharded write would take precedence on reading.
    fs::remove(d / kIndexName, ec);
    if (ec) return Status::Error(StrCat("cannot remove stale ", (d / kIndexName).string(), ": ",
                                        ec.message()));
    return Status::Ok();
  }

  json weight_map = json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string name = ShardName(i, shards.size());
    GK_RETURN_IF_ERROR(WriteOne((d / name).string(), shards[i], metadata));
    if (on_file) on_file((d / name).string());
    for (const TensorSpec* t : shards[i]) weight_map[t->name] = name;
  }
  // The index goes last so it only ever names complete shards.
  json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  return WriteFileAtomic((d / kIndexName).string(), index.dump(2) + "\n");
}

}  // namespace gk
