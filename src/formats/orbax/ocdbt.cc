#include "formats/orbax/ocdbt.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <utility>

#include "formats/orbax/crc32c.h"
#include "formats/orbax/zstd_codec.h"

namespace gk::orbax::ocdbt {
namespace {

namespace fs = std::filesystem;

// ---- Primitive decoding ----

// A cursor over a decoded body. Every read names its field, so an error reads like
// "truncated in key_suffix_length[3]" or "data_file_id[0] = 7 exceeds 0".
class Reader {
 public:
  explicit Reader(std::string_view d) : d_(d) {}

  size_t remaining() const { return d_.size() - pos_; }
  size_t pos() const { return pos_; }
  const std::string& error() const { return err_; }

  bool Fail(const std::string& m) {
    if (err_.empty()) err_ = StrCat(m, " (at byte ", pos_, " of the ", d_.size(), "-byte body)");
    return false;
  }

  bool Byte(uint8_t* v, const std::string& field) {
    if (pos_ >= d_.size()) return Fail(StrCat("truncated in ", field));
    *v = uint8_t(d_[pos_++]);
    return true;
  }

  // Unsigned LEB128 of at most 10 bytes, rejecting values above `max`.
  bool Varint(uint64_t* v, uint64_t max, const std::string& field) {
    uint64_t x = 0;
    for (int i = 0;; ++i) {
      if (pos_ >= d_.size()) return Fail(StrCat("truncated in varint ", field));
      const uint8_t b = uint8_t(d_[pos_++]);
      if (i == 9 && b > 1) return Fail(StrCat("varint ", field, " overflows 64 bits"));
      x |= uint64_t(b & 0x7f) << (7 * i);
      if (!(b & 0x80)) break;
    }
    if (x > max) return Fail(StrCat(field, " = ", x, " exceeds the limit of ", max));
    *v = x;
    return true;
  }

  bool Bytes(size_t n, std::string_view* out, const std::string& field) {
    if (n > remaining()) {
      return Fail(StrCat("truncated in ", field, " (", n, " bytes needed, ", remaining(), " left)"));
    }
    *out = d_.substr(pos_, n);
    pos_ += n;
    return true;
  }

  bool LE(int bytes, uint64_t* v, const std::string& field) {
    std::string_view s;
    if (!Bytes(size_t(bytes), &s, field)) return false;
    uint64_t x = 0;
    for (int i = 0; i < bytes; ++i) x |= uint64_t(uint8_t(s[size_t(i)])) << (8 * i);
    *v = x;
    return true;
  }

  // Counts of entries are checked against what is left, so a corrupt count cannot make us
  // allocate more than the body could describe (each entry takes at least `min_bytes`).
  bool Count(uint64_t* n, uint64_t max, size_t min_bytes, const std::string& field) {
    if (!Varint(n, max, field)) return false;
    if (*n > remaining() / std::max<size_t>(min_bytes, 1)) {
      return Fail(StrCat(field, " = ", *n, " entries cannot fit in the ", remaining(),
                         " bytes that are left"));
    }
    return true;
  }

  bool AtEnd(const char* what) {
    if (pos_ != d_.size()) {
      return Fail(StrCat(d_.size() - pos_, " unexpected bytes after the end of the ", what));
    }
    return true;
  }

 private:
  std::string_view d_;
  size_t pos_ = 0;
  std::string err_;
};

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(char(uint8_t(v) | 0x80));
    v >>= 7;
  }
  out->push_back(char(v));
}

void PutLE(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(char(uint8_t(v >> (8 * i))));
}

size_t CommonPrefix(std::string_view a, std::string_view b) {
  size_t n = std::min(a.size(), b.size()), i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

std::string Hex32(uint32_t v) {
  char buf[11];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

// ---- Data-file table (spec §3.6) ----

bool ReadDataFileTable(Reader& r, const std::string& transitive, std::vector<DataFile>* files) {
  uint64_t n;
  if (!r.Count(&n, kMaxNodeEntries, 2, "data_file_table.num_files")) return false;
  std::vector<uint64_t> prefix(n, 0), suffix(n), base(n);
  for (uint64_t i = 1; i < n; ++i) {
    if (!r.Varint(&prefix[i], kMaxPathLength, StrCat("data_file.prefix_length[", i, "]"))) return false;
  }
  for (uint64_t i = 0; i < n; ++i) {
    if (!r.Varint(&suffix[i], kMaxPathLength, StrCat("data_file.suffix_length[", i, "]"))) return false;
  }
  for (uint64_t i = 0; i < n; ++i) {
    if (!r.Varint(&base[i], kMaxPathLength, StrCat("data_file.base_path_length[", i, "]"))) return false;
  }
  const uint64_t max_len = kMaxPathLength - std::min<uint64_t>(kMaxPathLength, transitive.size());
  files->clear();
  files->reserve(n);
  std::string prev;  // previous path without the transitive part
  for (uint64_t i = 0; i < n; ++i) {
    if (prefix[i] > prev.size()) {
      return r.Fail(StrCat("data_file.prefix_length[", i, "] = ", prefix[i],
                           " exceeds the previous path length ", prev.size()));
    }
    const uint64_t len = prefix[i] + suffix[i];
    if (len > max_len) {
      return r.Fail(StrCat("data file path ", i, " is ", len, " bytes, over the limit of ", max_len));
    }
    if (base[i] > len) {
      return r.Fail(StrCat("data_file.base_path_length[", i, "] = ", base[i],
                           " exceeds the path length ", len));
    }
    const uint64_t prev_base = i == 0 ? 0 : base[i - 1];
    if (i > 0 && prefix[i] > std::min(prev_base, base[i]) && base[i] != prev_base) {
      return r.Fail(StrCat("data_file.prefix_length[", i, "] = ", prefix[i],
                           " extends into the relative path although the base paths differ"));
    }
    std::string_view s;
    if (!r.Bytes(size_t(suffix[i]), &s, StrCat("data file path ", i))) return false;
    std::string path = prev.substr(0, size_t(prefix[i]));
    path.append(s);
    DataFile f;
    f.base_path = transitive + path.substr(0, size_t(base[i]));
    f.relative_path = path.substr(size_t(base[i]));
    files->push_back(std::move(f));
    prev = std::move(path);
  }
  return true;
}

// Files must be sorted and unique (the encoder of TensorStore sorts by (base, relative)).
void WriteDataFileTable(std::string* out, const std::vector<DataFile>& files) {
  PutVarint(out, files.size());
  std::vector<size_t> prefix(files.size(), 0);
  for (size_t i = 1; i < files.size(); ++i) {
    const DataFile& a = files[i - 1];
    const DataFile& b = files[i];
    size_t p = CommonPrefix(a.base_path, b.base_path);
    if (a.base_path.size() == b.base_path.size() && p == b.base_path.size()) {
      p += CommonPrefix(a.relative_path, b.relative_path);
    }
    prefix[i] = p;
    PutVarint(out, p);
  }
  for (size_t i = 0; i < files.size(); ++i) {
    PutVarint(out, files[i].base_path.size() + files[i].relative_path.size() - prefix[i]);
  }
  for (const DataFile& f : files) PutVarint(out, f.base_path.size());
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string full = files[i].path();
    out->append(full.substr(prefix[i]));
  }
}

Status CheckDataFiles(const std::vector<DataFile>& files) {
  for (size_t i = 0; i < files.size(); ++i) {
    if (i > 0 && !(files[i - 1] < files[i])) {
      return Status::Error("data-file table must be sorted by (base_path, relative_path) without duplicates");
    }
    if (files[i].path().size() > kMaxPathLength) return Status::Error("data-file path too long");
  }
  return Status::Ok();
}

// ---- Node references (file ids, offsets, lengths, statistics; column by column) ----

bool ReadNodeRefs(Reader& r, size_t num_files, bool allow_missing, std::vector<NodeRef*> refs,
                  const char* what) {
  for (size_t i = 0; i < refs.size(); ++i) {
    if (!r.Varint(&refs[i]->file, ~uint64_t{0}, StrCat(what, ".data_file_id[", i, "]"))) return false;
    if (refs[i]->file >= num_files) {
      return r.Fail(StrCat(what, ".data_file_id[", i, "] = ", refs[i]->file,
                           " is outside the data-file table of ", num_files, " entries"));
    }
  }
  for (size_t i = 0; i < refs.size(); ++i) {
    if (!r.Varint(&refs[i]->offset, ~uint64_t{0}, StrCat(what, ".offset[", i, "]"))) return false;
  }
  for (size_t i = 0; i < refs.size(); ++i) {
    if (!r.Varint(&refs[i]->length, ~uint64_t{0}, StrCat(what, ".length[", i, "]"))) return false;
    uint64_t end;
    if (!(allow_missing && refs[i]->missing()) &&
        __builtin_add_overflow(refs[i]->offset, refs[i]->length, &end)) {
      return r.Fail(StrCat(what, "[", i, "]: offset ", refs[i]->offset, " + length ",
                           refs[i]->length, " overflows"));
    }
  }
  for (size_t i = 0; i < refs.size(); ++i) {
    if (!r.Varint(&refs[i]->stats.num_keys, ~uint64_t{0}, StrCat(what, ".num_keys[", i, "]"))) return false;
  }
  for (size_t i = 0; i < refs.size(); ++i) {
    if (!r.Varint(&refs[i]->stats.num_tree_bytes, ~uint64_t{0}, StrCat(what, ".num_tree_bytes[", i, "]"))) {
      return false;
    }
  }
  for (size_t i = 0; i < refs.size(); ++i) {
    if (!r.Varint(&refs[i]->stats.num_indirect_value_bytes, ~uint64_t{0},
                  StrCat(what, ".num_indirect_value_bytes[", i, "]"))) {
      return false;
    }
  }
  return true;
}

void WriteNodeRefs(std::string* out, const std::vector<const NodeRef*>& refs) {
  for (const NodeRef* n : refs) PutVarint(out, n->file);
  for (const NodeRef* n : refs) PutVarint(out, n->offset);
  for (const NodeRef* n : refs) PutVarint(out, n->length);
  for (const NodeRef* n : refs) PutVarint(out, n->stats.num_keys);
  for (const NodeRef* n : refs) PutVarint(out, n->stats.num_tree_bytes);
  for (const NodeRef* n : refs) PutVarint(out, n->stats.num_indirect_value_bytes);
}

// ---- Config (spec §3.4) ----

bool ReadConfig(Reader& r, Config* c) {
  std::string_view uuid;
  if (!r.Bytes(16, &uuid, "config.uuid")) return false;
  std::memcpy(c->uuid.data(), uuid.data(), 16);
  if (!r.Byte(&c->manifest_kind, "config.manifest_kind")) return false;
  if (c->manifest_kind > 1) {
    return r.Fail(StrCat("config.manifest_kind = ", int(c->manifest_kind), " (expected 0 single or 1 numbered)"));
  }
  uint64_t v;
  if (!r.Varint(&v, kMaxInlineValueLength, "config.max_inline_value_bytes")) return false;
  c->max_inline_value_bytes = uint32_t(v);
  if (!r.Varint(&v, 0xffffffffu, "config.max_decoded_node_bytes")) return false;
  c->max_decoded_node_bytes = uint32_t(v);
  if (!r.Byte(&c->version_tree_arity_log2, "config.version_tree_arity_log2")) return false;
  if (c->version_tree_arity_log2 < 1 || c->version_tree_arity_log2 > 16) {
    return r.Fail(StrCat("config.version_tree_arity_log2 = ", int(c->version_tree_arity_log2),
                         " is outside [1, 16]"));
  }
  if (!r.Varint(&v, 0xffffffffu, "config.compression_method")) return false;
  if (v > 1) return r.Fail(StrCat("config.compression_method = ", v, " (expected 0 none or 1 zstd)"));
  c->compression = uint32_t(v);
  if (c->compression == 1) {
    if (!r.LE(4, &v, "config.zstd_level")) return false;
    c->zstd_level = int32_t(uint32_t(v));
  }
  return true;
}

void WriteConfig(std::string* out, const Config& c) {
  out->append(reinterpret_cast<const char*>(c.uuid.data()), 16);
  out->push_back(char(c.manifest_kind));
  PutVarint(out, c.max_inline_value_bytes);
  PutVarint(out, c.max_decoded_node_bytes);
  out->push_back(char(c.version_tree_arity_log2));
  PutVarint(out, c.compression);
  if (c.compression == 1) PutLE(out, uint32_t(c.zstd_level), 4);
}

// ---- Keys (spec §3.9): prefix lengths, suffix lengths, [subtree prefix lengths], suffixes ----

template <class Entry>
bool ReadKeys(Reader& r, std::vector<Entry>* entries, bool interior) {
  const size_t n = entries->size();
  std::vector<uint64_t> prefix(n, 0), suffix(n);
  for (size_t i = 1; i < n; ++i) {
    if (!r.Varint(&prefix[i], kMaxKeyLength, StrCat("key_prefix_length[", i, "]"))) return false;
  }
  for (size_t i = 0; i < n; ++i) {
    if (!r.Varint(&suffix[i], kMaxKeyLength, StrCat("key_suffix_length[", i, "]"))) return false;
  }
  if constexpr (std::is_same_v<Entry, InteriorEntry>) {
    for (size_t i = 0; i < n; ++i) {
      if (!r.Varint(&(*entries)[i].subtree_common_prefix_length, kMaxKeyLength,
                    StrCat("subtree_common_prefix_length[", i, "]"))) {
        return false;
      }
    }
  }
  (void)interior;
  for (size_t i = 0; i < n; ++i) {
    const size_t prev_len = i == 0 ? 0 : (*entries)[i - 1].key.size();
    if (prefix[i] > prev_len) {
      return r.Fail(StrCat("key_prefix_length[", i, "] = ", prefix[i],
                           " exceeds the previous key length ", prev_len));
    }
    if (prefix[i] + suffix[i] > kMaxKeyLength) {
      return r.Fail(StrCat("key ", i, " is ", prefix[i] + suffix[i], " bytes, over the limit of ",
                           kMaxKeyLength));
    }
    std::string_view s;
    if (!r.Bytes(size_t(suffix[i]), &s, StrCat("key_suffix[", i, "]"))) return false;
    std::string key = i == 0 ? std::string() : (*entries)[i - 1].key.substr(0, size_t(prefix[i]));
    key.append(s);
    if (i > 0 && !((*entries)[i - 1].key < key)) {
      return r.Fail(StrCat("invalid key order: key ", i, " is not greater than key ", i - 1));
    }
    if constexpr (std::is_same_v<Entry, InteriorEntry>) {
      if ((*entries)[i].subtree_common_prefix_length > key.size()) {
        return r.Fail(StrCat("subtree_common_prefix_length[", i, "] = ",
                             (*entries)[i].subtree_common_prefix_length,
                             " exceeds the key length ", key.size()));
      }
    }
    (*entries)[i].key = std::move(key);
  }
  return true;
}

template <class Entry>
void WriteKeys(std::string* out, const std::vector<Entry>& entries) {
  std::vector<size_t> prefix(entries.size(), 0);
  for (size_t i = 1; i < entries.size(); ++i) {
    prefix[i] = CommonPrefix(entries[i - 1].key, entries[i].key);
    PutVarint(out, prefix[i]);
  }
  for (size_t i = 0; i < entries.size(); ++i) PutVarint(out, entries[i].key.size() - prefix[i]);
  if constexpr (std::is_same_v<Entry, InteriorEntry>) {
    for (const Entry& e : entries) PutVarint(out, e.subtree_common_prefix_length);
  }
  for (size_t i = 0; i < entries.size(); ++i) out->append(entries[i].key.substr(prefix[i]));
}

bool ReadLeafValues(Reader& r, size_t num_files, std::vector<LeafEntry>* entries) {
  const size_t n = entries->size();
  for (size_t i = 0; i < n; ++i) {
    if (!r.Varint(&(*entries)[i].length, ~uint64_t{0}, StrCat("value_length[", i, "]"))) return false;
  }
  for (size_t i = 0; i < n; ++i) {
    uint8_t kind;
    if (!r.Byte(&kind, StrCat("value_kind[", i, "]"))) return false;
    if (kind > 1) return r.Fail(StrCat("value_kind[", i, "] = ", int(kind), " (expected 0 inline or 1 out-of-line)"));
    LeafEntry& e = (*entries)[i];
    e.out_of_line = kind == 1;
    if (!e.out_of_line && e.length > kMaxInlineValueLength) {
      return r.Fail(StrCat("value_length[", i, "] = ", e.length, " exceeds the inline limit of ",
                           kMaxInlineValueLength));
    }
  }
  for (size_t i = 0; i < n; ++i) {
    LeafEntry& e = (*entries)[i];
    if (!e.out_of_line) continue;
    if (!r.Varint(&e.file, ~uint64_t{0}, StrCat("value data_file_id[", i, "]"))) return false;
    if (e.file >= num_files) {
      return r.Fail(StrCat("value data_file_id[", i, "] = ", e.file,
                           " is outside the data-file table of ", num_files, " entries"));
    }
  }
  for (size_t i = 0; i < n; ++i) {
    LeafEntry& e = (*entries)[i];
    if (!e.out_of_line) continue;
    if (!r.Varint(&e.offset, ~uint64_t{0}, StrCat("value offset[", i, "]"))) return false;
    uint64_t end;
    if (__builtin_add_overflow(e.offset, e.length, &end)) {
      return r.Fail(StrCat("value ", i, ": offset ", e.offset, " + length ", e.length, " overflows"));
    }
  }
  for (size_t i = 0; i < n; ++i) {
    LeafEntry& e = (*entries)[i];
    if (e.out_of_line) continue;
    std::string_view s;
    if (!r.Bytes(size_t(e.length), &s, StrCat("inline value[", i, "]"))) return false;
    e.value.assign(s);
  }
  return true;
}

// ---- Version-tree entry arrays (spec §3.7, §3.8) ----

bool ReadVersions(Reader& r, const Config& c, size_t num_files, std::vector<Version>* out) {
  uint64_t n;
  if (!r.Count(&n, uint64_t{1} << c.version_tree_arity_log2, 4, "num_versions")) return false;
  if (n == 0) return r.Fail("manifest lists no versions");
  out->resize(n);
  for (uint64_t i = 0; i < n; ++i) {
    if (!r.Varint(&(*out)[i].generation, ~uint64_t{0}, StrCat("generation_number[", i, "]"))) return false;
    if ((*out)[i].generation == 0 || (i > 0 && (*out)[i].generation <= (*out)[i - 1].generation)) {
      return r.Fail(StrCat("generation_number[", i, "] = ", (*out)[i].generation,
                           " is zero or not increasing"));
    }
  }
  for (uint64_t i = 0; i < n; ++i) {
    if (!r.Byte(&(*out)[i].root_height, StrCat("root_height[", i, "]"))) return false;
  }
  std::vector<NodeRef*> refs;
  for (Version& v : *out) refs.push_back(&v.root);
  if (!ReadNodeRefs(r, num_files, /*allow_missing=*/true, refs, "version root")) return false;
  for (uint64_t i = 0; i < n; ++i) {
    if (!r.LE(8, &(*out)[i].commit_time_ns, StrCat("commit_time[", i, "]"))) return false;
  }
  return true;
}

bool ReadVersionNodes(Reader& r, size_t num_files, std::vector<VersionNodeRef>* out) {
  uint64_t n;
  if (!r.Count(&n, 64, 4, "num_version_nodes")) return false;
  out->resize(n);
  for (uint64_t i = 0; i < n; ++i) {
    if (!r.Varint(&(*out)[i].generation, ~uint64_t{0}, StrCat("version_node.generation[", i, "]"))) return false;
  }
  for (uint64_t i = 0; i < n; ++i) {
    if (!r.Varint(&(*out)[i].file, ~uint64_t{0}, StrCat("version_node.data_file_id[", i, "]"))) return false;
    if ((*out)[i].file >= num_files) {
      return r.Fail(StrCat("version_node.data_file_id[", i, "] is outside the data-file table"));
    }
  }
  for (uint64_t i = 0; i < n; ++i) {
    if (!r.Varint(&(*out)[i].offset, ~uint64_t{0}, StrCat("version_node.offset[", i, "]"))) return false;
  }
  for (uint64_t i = 0; i < n; ++i) {
    if (!r.Varint(&(*out)[i].length, ~uint64_t{0}, StrCat("version_node.length[", i, "]"))) return false;
  }
  for (uint64_t i = 0; i < n; ++i) {
    if (!r.Varint(&(*out)[i].num_generations, ~uint64_t{0}, StrCat("version_node.num_generations[", i, "]"))) {
      return false;
    }
  }
  for (uint64_t i = 0; i < n; ++i) {
    if (!r.LE(8, &(*out)[i].commit_time_ns, StrCat("version_node.commit_time[", i, "]"))) return false;
  }
  for (uint64_t i = 0; i < n; ++i) {
    if (!r.Byte(&(*out)[i].height, StrCat("version_node.entry_height[", i, "]"))) return false;
    if ((*out)[i].height == 0 || (i > 0 && (*out)[i].height >= (*out)[i - 1].height)) {
      return r.Fail(StrCat("version_node.entry_height[", i, "] = ", int((*out)[i].height),
                           " is zero or not decreasing"));
    }
  }
  return true;
}

// A data-file path from a table must stay inside the database directory: relative, no "..".
Status CheckRelativePath(const std::string& p) {
  if (p.empty()) return Status::Error("an empty data-file path is referenced");
  if (p.find('\0') != std::string::npos) return Status::Error("a data-file path contains a NUL byte");
  if (p[0] == '/') return Status::Error(StrCat("data-file path '", p, "' is absolute"));
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find('/', start);
    if (end == std::string::npos) end = p.size();
    if (p.compare(start, end - start, "..") == 0) {
      return Status::Error(StrCat("data-file path '", p, "' leaves the database directory"));
    }
    start = end + 1;
  }
  return Status::Ok();
}

// ---- Tree walk ----

struct Walker {
  std::string db_dir;
  uint64_t max_node_bytes;
  FileSet* files;
  std::map<std::string, StoredValue>* out;
  // In a B+tree every node has one parent; a node referenced twice would let a corrupt tree
  // multiply its keys without bound, so it is refused.
  std::set<std::pair<int32_t, uint64_t>> visited;

  // Reads the node at `ref` of `table` (whose entries already include their transitive part).
  Status Visit(const std::vector<DataFile>& table, const NodeRef& ref, uint8_t height,
               const std::string& prefix) {
    const DataFile& df = table[size_t(ref.file)];
    const std::string rel = df.path();
    GK_RETURN_IF_ERROR(CheckRelativePath(rel).Wrap(db_dir));
    const int32_t id = files->Add(db_dir + "/" + rel);
    const std::string where = StrCat(files->path(id), " [b-tree node at offset ", ref.offset, ", ",
                                     ref.length, " bytes]");
    // An encoded node is at most its decoded size plus zstd's worst-case overhead.
    if (ref.length > max_node_bytes + (max_node_bytes >> 7) + (1u << 16)) {
      return Status::Error(StrCat(where, ": node length exceeds max_decoded_node_bytes ", max_node_bytes));
    }
    if (!visited.emplace(id, ref.offset).second) {
      return Status::Error(StrCat(where, ": the node is referenced twice; the tree is corrupt"));
    }
    GK_ASSIGN_OR_RETURN(uint64_t file_size, files->FileSize(id));
    if (ref.offset > file_size || ref.length > file_size - ref.offset) {
      return Status::Error(StrCat(where, ": lies past the end of the ", file_size, "-byte file; it is truncated"));
    }
    std::string bytes(size_t(ref.length), '\0');
    GK_RETURN_IF_ERROR(files->Read(id, ref.offset, ref.length, bytes.data()));
    auto decoded = DecodeBtreeNode(bytes, df.base_path, max_node_bytes);
    if (!decoded.ok()) return decoded.status().Wrap(where);
    BtreeNode node = std::move(decoded).value();
    if (node.height != height) {
      return Status::Error(StrCat(where, ": node height ", int(node.height), ", expected ", int(height)));
    }
    if (node.height == 0) {
      for (LeafEntry& e : node.leaf) {
        std::string key = prefix + e.key;
        StoredValue v;
        if (e.out_of_line) {
          const DataFile& vf = node.files[size_t(e.file)];
          const std::string vrel = vf.path();
          GK_RETURN_IF_ERROR(CheckRelativePath(vrel).Wrap(where));
          v.file = files->Add(db_dir + "/" + vrel);
          v.offset = e.offset;
          v.length = e.length;
        } else {
          v.inline_bytes = std::move(e.value);
        }
        if (!out->emplace(key, std::move(v)).second) {
          return Status::Error(StrCat(where, ": key '", key, "' appears twice"));
        }
      }
      return Status::Ok();
    }
    for (const InteriorEntry& e : node.interior) {
      GK_RETURN_IF_ERROR(Visit(node.files, e.child, uint8_t(height - 1),
                               prefix + e.key.substr(0, size_t(e.subtree_common_prefix_length))));
    }
    return Status::Ok();
  }
};

}  // namespace

// ---- Envelope ----

Result<std::string> DecodeEnvelope(std::string_view encoded, uint32_t magic, const char* what,
                                   uint64_t max_body_bytes) {
  using R = Result<std::string>;
  constexpr size_t kMin = 4 + 8 + 4;
  if (encoded.size() < kMin) {
    return R::Error(StrCat("OCDBT ", what, " is ", encoded.size(), " bytes, shorter than the ",
                           kMin, "-byte minimum (truncated)"));
  }
  const auto* b = reinterpret_cast<const uint8_t*>(encoded.data());
  const uint32_t m = (uint32_t(b[0]) << 24) | (uint32_t(b[1]) << 16) | (uint32_t(b[2]) << 8) | b[3];
  if (m != magic) {
    return R::Error(StrCat("OCDBT ", what, " starts with magic ", Hex32(m), ", expected ", Hex32(magic)));
  }
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i) length |= uint64_t(b[4 + i]) << (8 * i);
  if (length != encoded.size()) {
    return R::Error(StrCat("OCDBT ", what, " header says ", length, " bytes but ", encoded.size(),
                           " are present (truncated or corrupt)"));
  }
  uint32_t stored = 0;
  for (int i = 0; i < 4; ++i) stored |= uint32_t(b[encoded.size() - 4 + size_t(i)]) << (8 * i);
  const uint32_t actual = Crc32c(encoded.data(), encoded.size() - 4);
  if (stored != actual) {
    return R::Error(StrCat("OCDBT ", what, " fails its CRC-32C check (stored ", Hex32(stored),
                           ", computed ", Hex32(actual), "): the bytes are corrupt"));
  }
  Reader r(encoded.substr(12, encoded.size() - 16));
  uint64_t version, compression;
  if (!r.Varint(&version, 0xffffffffu, "format version") ||
      !r.Varint(&compression, 0xffffffffu, "compression format")) {
    return R::Error(StrCat("OCDBT ", what, ": ", r.error()));
  }
  if (version != 0) return R::Error(StrCat("OCDBT ", what, " has format version ", version, "; only 0 is supported"));
  std::string_view body = encoded.substr(12 + r.pos(), encoded.size() - 16 - r.pos());
  if (compression == 0) {
    if (body.size() > max_body_bytes) {
      return R::Error(StrCat("OCDBT ", what, " body of ", body.size(), " bytes exceeds the limit of ", max_body_bytes));
    }
    return std::string(body);
  }
  if (compression != 1) {
    return R::Error(StrCat("OCDBT ", what, " has unsupported compression format ", compression,
                           " (0 raw and 1 zstd are defined)"));
  }
  auto d = ZstdDecompressBounded(body, max_body_bytes);
  if (!d.ok()) return R::Error(StrCat("OCDBT ", what, " body: ", d.message()));
  return std::move(d).value();
}

Result<std::string> EncodeEnvelope(uint32_t magic, std::string_view body, bool zstd, int zstd_level) {
  std::string out;
  for (int i = 3; i >= 0; --i) out.push_back(char(uint8_t(magic >> (8 * i))));
  out.append(8, '\0');  // length, filled in below
  PutVarint(&out, 0);   // format version
  PutVarint(&out, zstd ? 1 : 0);
  if (zstd) {
    GK_ASSIGN_OR_RETURN(std::string c, ZstdCompress(body.data(), body.size(), zstd_level, /*content_size=*/true));
    out += c;
  } else {
    out.append(body);
  }
  const uint64_t length = out.size() + 4;
  for (int i = 0; i < 8; ++i) out[size_t(4 + i)] = char(uint8_t(length >> (8 * i)));
  PutLE(&out, Crc32c(out.data(), out.size()), 4);
  return out;
}

// ---- Manifest ----

Result<Manifest> DecodeManifest(std::string_view encoded) {
  using R = Result<Manifest>;
  GK_ASSIGN_OR_RETURN(std::string body, DecodeEnvelope(encoded, kManifestMagic, "manifest", kMaxManifestBodyBytes));
  Manifest m;
  Reader r(body);
  const auto fail = [&]() { return R::Error(StrCat("OCDBT manifest: ", r.error())); };
  if (!ReadConfig(r, &m.config)) return fail();
  if (m.config.manifest_kind == 1) {
    if (!r.AtEnd("config-only manifest")) return fail();
    return m;
  }
  if (!ReadDataFileTable(r, "", &m.files)) return fail();
  if (!ReadVersions(r, m.config, m.files.size(), &m.versions)) return fail();
  if (!ReadVersionNodes(r, m.files.size(), &m.version_nodes)) return fail();
  if (!r.AtEnd("manifest")) return fail();
  return m;
}

Result<std::string> EncodeManifest(const Manifest& m, bool zstd) {
  GK_RETURN_IF_ERROR(CheckDataFiles(m.files));
  std::string body;
  WriteConfig(&body, m.config);
  if (m.config.manifest_kind == 1) return EncodeEnvelope(kManifestMagic, body, zstd, m.config.zstd_level);  // config only
  WriteDataFileTable(&body, m.files);
  PutVarint(&body, m.versions.size());
  for (const Version& v : m.versions) PutVarint(&body, v.generation);
  for (const Version& v : m.versions) body.push_back(char(v.root_height));
  std::vector<const NodeRef*> refs;
  for (const Version& v : m.versions) refs.push_back(&v.root);
  WriteNodeRefs(&body, refs);
  for (const Version& v : m.versions) PutLE(&body, v.commit_time_ns, 8);
  PutVarint(&body, m.version_nodes.size());
  for (const auto& v : m.version_nodes) PutVarint(&body, v.generation);
  for (const auto& v : m.version_nodes) PutVarint(&body, v.file);
  for (const auto& v : m.version_nodes) PutVarint(&body, v.offset);
  for (const auto& v : m.version_nodes) PutVarint(&body, v.length);
  for (const auto& v : m.version_nodes) PutVarint(&body, v.num_generations);
  for (const auto& v : m.version_nodes) PutLE(&body, v.commit_time_ns, 8);
  for (const auto& v : m.version_nodes) body.push_back(char(v.height));
  return EncodeEnvelope(kManifestMagic, body, zstd, m.config.zstd_level);
}

// ---- B+tree node ----

Result<BtreeNode> DecodeBtreeNode(std::string_view encoded, const std::string& transitive_path,
                                  uint64_t max_decoded_node_bytes) {
  using R = Result<BtreeNode>;
  GK_ASSIGN_OR_RETURN(std::string body,
                      DecodeEnvelope(encoded, kBtreeNodeMagic, "b-tree node", max_decoded_node_bytes));
  BtreeNode node;
  Reader r(body);
  const auto fail = [&]() { return R::Error(StrCat("OCDBT b-tree node: ", r.error())); };
  if (!r.Byte(&node.height, "height")) return fail();
  if (!ReadDataFileTable(r, transitive_path, &node.files)) return fail();
  uint64_t n;
  if (!r.Count(&n, kMaxNodeEntries, 1, "num_entries")) return fail();
  if (n == 0) {
    r.Fail("b-tree node has no entries");
    return fail();
  }
  if (node.height == 0) {
    node.leaf.resize(n);
    if (!ReadKeys(r, &node.leaf, false) || !ReadLeafValues(r, node.files.size(), &node.leaf)) return fail();
  } else {
    node.interior.resize(n);
    if (!ReadKeys(r, &node.interior, true)) return fail();
    std::vector<NodeRef*> refs;
    for (InteriorEntry& e : node.interior) refs.push_back(&e.child);
    if (!ReadNodeRefs(r, node.files.size(), /*allow_missing=*/false, refs, "child")) return fail();
  }
  if (!r.AtEnd("b-tree node")) return fail();
  return node;
}

Result<std::string> EncodeBtreeNode(const BtreeNode& node, bool zstd, int zstd_level) {
  using R = Result<std::string>;
  GK_RETURN_IF_ERROR(CheckDataFiles(node.files));
  const size_t n = node.height == 0 ? node.leaf.size() : node.interior.size();
  if (n == 0 || n > kMaxNodeEntries) return R::Error(StrCat("a b-tree node must have 1 to ", kMaxNodeEntries, " entries, not ", n));
  std::string body;
  body.push_back(char(node.height));
  WriteDataFileTable(&body, node.files);
  PutVarint(&body, n);
  const auto check_keys = [&](const auto& entries) -> Status {
    for (size_t i = 0; i < entries.size(); ++i) {
      if (entries[i].key.size() > kMaxKeyLength) return Status::Error(StrCat("key '", entries[i].key.substr(0, 80), "...' is too long"));
      if (i > 0 && !(entries[i - 1].key < entries[i].key)) {
        return Status::Error(StrCat("b-tree keys must be strictly increasing: '", entries[i].key,
                                    "' after '", entries[i - 1].key, "'"));
      }
    }
    return Status::Ok();
  };
  if (node.height == 0) {
    GK_RETURN_IF_ERROR(check_keys(node.leaf));
    WriteKeys(&body, node.leaf);
    for (const LeafEntry& e : node.leaf) PutVarint(&body, e.out_of_line ? e.length : e.value.size());
    for (const LeafEntry& e : node.leaf) body.push_back(char(e.out_of_line ? 1 : 0));
    for (const LeafEntry& e : node.leaf) {
      if (!e.out_of_line) continue;
      if (e.file >= node.files.size()) return R::Error("leaf entry refers to a data file outside the node's table");
      PutVarint(&body, e.file);
    }
    for (const LeafEntry& e : node.leaf) {
      if (e.out_of_line) PutVarint(&body, e.offset);
    }
    for (const LeafEntry& e : node.leaf) {
      if (!e.out_of_line) body += e.value;
    }
  } else {
    GK_RETURN_IF_ERROR(check_keys(node.interior));
    WriteKeys(&body, node.interior);
    std::vector<const NodeRef*> refs;
    for (const InteriorEntry& e : node.interior) {
      if (e.child.file >= node.files.size()) return R::Error("child reference outside the node's table");
      refs.push_back(&e.child);
    }
    WriteNodeRefs(&body, refs);
  }
  return EncodeEnvelope(kBtreeNodeMagic, body, zstd, zstd_level);
}

// ---- Reading a database ----

Status ReadDatabase(const std::string& db_dir, FileSet* files, std::map<std::string, StoredValue>* out) {
  std::string manifest_path = db_dir + "/manifest.ocdbt";
  GK_ASSIGN_OR_RETURN(std::string bytes, ReadFile(manifest_path));
  auto m = DecodeManifest(bytes);
  if (!m.ok()) return m.status().Wrap(manifest_path);
  if (m->config.manifest_kind == 1) {
    // Numbered manifests: the newest manifest.<16 hex> holds the versions.
    std::string best;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(db_dir, ec)) {
      const std::string name = e.path().filename().string();
      if (name.size() == 9 + 16 && name.rfind("manifest.", 0) == 0 &&
          name.find_first_not_of("0123456789abcdef", 9) == std::string::npos && name > best) {
        best = name;
      }
    }
    if (best.empty()) {
      return Status::Error(StrCat(manifest_path, ": numbered manifest kind, but no manifest.<16 hex> file is present"));
    }
    manifest_path = db_dir + "/" + best;
    GK_ASSIGN_OR_RETURN(bytes, ReadFile(manifest_path));
    m = DecodeManifest(bytes);
    if (!m.ok()) return m.status().Wrap(manifest_path);
    if (m->config.manifest_kind == 1 || m->versions.empty()) {
      return Status::Error(StrCat(manifest_path, ": numbered manifest holds no versions"));
    }
  }
  const Version& latest = m->versions.back();
  if (latest.root.missing()) return Status::Ok();  // an empty database
  // Orbax sets 1e8; TensorStore allows up to 4 GiB, which a corrupt manifest could use to make
  // a zstd bomb allocate that much, so decoding stops at 1 GiB.
  const uint64_t max_node_bytes = std::min<uint64_t>(m->config.max_decoded_node_bytes, 1ull << 30);
  Walker w{db_dir, max_node_bytes, files, out, {}};
  return w.Visit(m->files, latest.root, latest.root_height, "").Wrap(StrCat(manifest_path, ": b-tree of generation ", latest.generation));
}

// ---- Writing a database ----

std::string RandomHex(size_t n_bytes) {
  static thread_local std::mt19937_64 rng([] {
    std::random_device rd;
    return (uint64_t(rd()) << 32) ^ rd() ^ uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  }());
  static const char* kDigits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n_bytes; ++i) {
    const auto b = uint8_t(rng());
    s.push_back(kDigits[b >> 4]);
    s.push_back(kDigits[b & 15]);
  }
  return s;
}

DatabaseWriter::DatabaseWriter(std::string dir, std::string data_rel, AtomicFile data, WriterOptions o)
    : dir_(std::move(dir)), data_rel_(std::move(data_rel)), data_(std::move(data)), opts_(o) {}

DatabaseWriter::~DatabaseWriter() = default;

Result<std::unique_ptr<DatabaseWriter>> DatabaseWriter::Create(const std::string& db_dir, const WriterOptions& o) {
  using R = Result<std::unique_ptr<DatabaseWriter>>;
  std::error_code ec;
  if (!fs::is_directory(db_dir, ec)) return R::Error(StrCat(db_dir, ": not a directory"));
  if (fs::exists(db_dir + "/manifest.ocdbt", ec)) {
    return R::Error(StrCat(db_dir, ": already holds an OCDBT database (manifest.ocdbt)"));
  }
  if (o.max_node_entries < 2 || o.max_node_entries > kMaxNodeEntries) {
    return R::Error(StrCat("max_node_entries must be in [2, ", kMaxNodeEntries, "]"));
  }
  fs::create_directories(db_dir + "/d", ec);
  if (ec) return R::Error(StrCat(db_dir, "/d: cannot create: ", ec.message()));
  const std::string rel = "d/" + RandomHex(16);
  GK_ASSIGN_OR_RETURN(AtomicFile f, AtomicFile::Create(db_dir + "/" + rel));
  return std::unique_ptr<DatabaseWriter>(new DatabaseWriter(db_dir, rel, std::move(f), o));
}

Status DatabaseWriter::Append(std::string_view bytes) {
  GK_RETURN_IF_ERROR(data_.Write(bytes));
  data_size_ += bytes.size();
  return Status::Ok();
}

Status DatabaseWriter::Put(std::string key, std::string_view value) {
  if (committed_) return Status::Error("DatabaseWriter::Put after Commit");
  if (key.size() > kMaxKeyLength) return Status::Error(StrCat("OCDBT key of ", key.size(), " bytes exceeds ", kMaxKeyLength));
  LeafEntry e;
  e.key = std::move(key);
  e.length = value.size();
  if (value.size() > Config{}.max_inline_value_bytes) {
    e.out_of_line = true;
    e.file = 0;
    e.offset = data_size_;
    GK_RETURN_IF_ERROR(Append(value));
    indirect_bytes_ += value.size();
  } else {
    e.value.assign(value);
  }
  entries_.push_back(std::move(e));
  return Status::Ok();
}

Status DatabaseWriter::Commit() {
  if (committed_) return Status::Error("DatabaseWriter::Commit called twice");
  committed_ = true;
  std::sort(entries_.begin(), entries_.end(),
            [](const LeafEntry& a, const LeafEntry& b) { return a.key < b.key; });
  for (size_t i = 1; i < entries_.size(); ++i) {
    if (entries_[i].key == entries_[i - 1].key) {
      return Status::Error(StrCat("OCDBT key '", entries_[i].key, "' was written twice"));
    }
  }
  const std::vector<DataFile> table = {DataFile{"", data_rel_}};
  const int level = Config{}.zstd_level;
  Manifest m;
  const std::string uuid_hex = RandomHex(16);
  for (size_t i = 0; i < 16; ++i) m.config.uuid[i] = uint8_t(std::stoul(uuid_hex.substr(2 * i, 2), nullptr, 16));
  Version v;
  v.generation = 1;
  v.commit_time_ns = uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                  std::chrono::system_clock::now().time_since_epoch()).count());
  if (entries_.empty()) {
    // An empty database: a "missing" root reference into an empty ("", "") table entry.
    m.files = {DataFile{"", ""}};
    v.root.offset = v.root.length = kMissing;
  } else {
    // Leaves of at most max_node_entries keys (and ~64 MiB decoded, well under the 1e8-byte
    // node limit), then interior levels until one root. Interior entries carry the child's
    // first key and no subtree common prefix, so every node stores full keys.
    constexpr uint64_t kMaxNodeBody = 64u << 20;
    struct Child { std::string first_key; NodeRef ref; };
    std::vector<Child> level_nodes;
    {
      BtreeNode leaf;
      uint64_t body_bytes = 0;
      const auto flush = [&]() -> Status {
        if (leaf.leaf.empty()) return Status::Ok();
        Statistics st;
        st.num_keys = leaf.leaf.size();
        bool any_ool = false;
        for (const LeafEntry& e : leaf.leaf) {
          if (e.out_of_line) {
            any_ool = true;
            st.num_indirect_value_bytes += e.length;
          }
        }
        if (any_ool) leaf.files = table;
        GK_ASSIGN_OR_RETURN(std::string enc, EncodeBtreeNode(leaf, opts_.zstd_nodes, level));
        Child c{leaf.leaf.front().key, NodeRef{0, data_size_, enc.size(), st}};
        c.ref.stats.num_tree_bytes = enc.size();
        GK_RETURN_IF_ERROR(Append(enc));
        level_nodes.push_back(std::move(c));
        leaf = BtreeNode();
        body_bytes = 0;
        return Status::Ok();
      };
      for (LeafEntry& e : entries_) {
        const uint64_t cost = e.key.size() + e.value.size() + 32;
        if (leaf.leaf.size() >= opts_.max_node_entries || (body_bytes + cost > kMaxNodeBody && !leaf.leaf.empty())) {
          GK_RETURN_IF_ERROR(flush());
        }
        body_bytes += cost;
        leaf.leaf.push_back(std::move(e));
      }
      GK_RETURN_IF_ERROR(flush());
    }
    uint8_t height = 0;
    while (level_nodes.size() > 1) {
      ++height;
      std::vector<Child> next;
      for (size_t i = 0; i < level_nodes.size(); i += opts_.max_node_entries) {
        BtreeNode node;
        node.height = height;
        node.files = table;
        Statistics st;
        const size_t end = std::min(level_nodes.size(), size_t(i + opts_.max_node_entries));
        for (size_t j = i; j < end; ++j) {
          InteriorEntry ie;
          ie.key = level_nodes[j].first_key;
          ie.child = level_nodes[j].ref;
          st.num_keys += ie.child.stats.num_keys;
          st.num_tree_bytes += ie.child.stats.num_tree_bytes;
          st.num_indirect_value_bytes += ie.child.stats.num_indirect_value_bytes;
          node.interior.push_back(std::move(ie));
        }
        GK_ASSIGN_OR_RETURN(std::string enc, EncodeBtreeNode(node, opts_.zstd_nodes, level));
        st.num_tree_bytes += enc.size();
        next.push_back(Child{level_nodes[i].first_key, NodeRef{0, data_size_, enc.size(), st}});
        GK_RETURN_IF_ERROR(Append(enc));
      }
      level_nodes = std::move(next);
    }
    m.files = table;
    v.root_height = height;
    v.root = level_nodes.front().ref;
  }
  GK_RETURN_IF_ERROR(data_.Commit());
  m.versions.push_back(v);
  GK_ASSIGN_OR_RETURN(std::string manifest, EncodeManifest(m, opts_.zstd_nodes));
  return WriteFileAtomic(dir_ + "/manifest.ocdbt", manifest);
}

}  // namespace gk::orbax::ocdbt
