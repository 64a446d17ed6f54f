// OCDBT (TensorStore's "optionally-cooperative distributed B+tree"), the key-value database an
// Orbax item stores its zarr arrays in. Layout and encodings: ../shared/spec/orbax.md §3.
//
//   manifest.ocdbt    envelope(magic 0x0cdb3a2a){config, data-file table, inline versions,
//                     version-tree node refs}; the last inline version is the latest.
//   d/<32 hex>        data files: concatenated out-of-line values and encoded nodes, each
//                     referenced by (file, offset, length).
//   B+tree node       envelope(magic 0x0cdb20de){height, data-file table, entries}; leaves hold
//                     keys with inline values or (file, offset) references, interior nodes
//                     child references with the key ranges they cover.
//
// Every envelope is magic (u32 BE), length (u64 LE, the whole object), format version
// (varint 0), compression (varint: 0 raw, 1 zstd), body, CRC-32C (u32 LE) of all bytes
// before it. Columns of an entry array are stored field by field, never entry by entry.
//
// The codecs are pure functions over bytes (the fuzz targets call them directly); the
// database reader walks the latest version's tree and returns every key; the writer emits
// one fresh database (one generation, one data file) by the spec's §3.11 recipe.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "formats/orbax/file_set.h"
#include "util/atomic_file.h"
#include "util/result.h"

namespace gk::orbax::ocdbt {

constexpr uint32_t kManifestMagic = 0x0cdb3a2a;
constexpr uint32_t kVersionNodeMagic = 0x0cdb1234;
constexpr uint32_t kBtreeNodeMagic = 0x0cdb20de;
constexpr uint64_t kMaxNodeEntries = 1u << 20;       // entries per B+tree node
constexpr uint64_t kMaxInlineValueLength = 1u << 20;  // hard limit on an inline value
constexpr uint64_t kMaxKeyLength = 65535;
constexpr uint64_t kMaxPathLength = 65535;
constexpr uint64_t kMissing = ~uint64_t{0};  // offset and length of a "missing" reference
// Decoded-size cap for a manifest body (manifests are a few hundred bytes in practice).
constexpr uint64_t kMaxManifestBodyBytes = 64u << 20;

// ---- Envelope ----

// Verifies magic, length, version, CRC and the compression framing of one encoded object and
// returns its body (decompressed; at most max_body_bytes). Errors name `what` ("manifest",
// "b-tree node").
Result<std::string> DecodeEnvelope(std::string_view encoded, uint32_t magic, const char* what,
                                   uint64_t max_body_bytes);
// zstd level 0 is zstd's default level (TensorStore's convention).
Result<std::string> EncodeEnvelope(uint32_t magic, std::string_view body, bool zstd, int zstd_level);

// ---- Structures ----

struct Config {
  std::array<uint8_t, 16> uuid{};
  uint8_t manifest_kind = 0;  // 0 single (config + versions), 1 numbered
  uint32_t max_inline_value_bytes = 1024;
  uint32_t max_decoded_node_bytes = 100000000;
  uint8_t version_tree_arity_log2 = 4;
  uint32_t compression = 1;  // 0 none, 1 zstd
  int32_t zstd_level = 0;
};

// One data-file table entry. base_path already includes the transitive path of the object the
// table was read from, so the file is <database dir>/<base_path><relative_path>.
struct DataFile {
  std::string base_path, relative_path;
  std::string path() const { return base_path + relative_path; }
  bool operator<(const DataFile& o) const {
    return base_path != o.base_path ? base_path < o.base_path : relative_path < o.relative_path;
  }
  bool operator==(const DataFile& o) const {
    return base_path == o.base_path && relative_path == o.relative_path;
  }
};

struct Statistics {
  uint64_t num_keys = 0, num_tree_bytes = 0, num_indirect_value_bytes = 0;
};

// A reference to an encoded node: bytes [offset, offset + length) of files[file].
struct NodeRef {
  uint64_t file = 0, offset = 0, length = 0;
  Statistics stats;
  bool missing() const { return offset == kMissing && length == kMissing; }
};

struct Version {
  uint64_t generation = 0;
  uint8_t root_height = 0;
  NodeRef root;
  uint64_t commit_time_ns = 0;
};

struct VersionNodeRef {
  uint64_t generation = 0, file = 0, offset = 0, length = 0, num_generations = 0;
  uint64_t commit_time_ns = 0;
  uint8_t height = 0;
};

struct Manifest {
  Config config;
  std::vector<DataFile> files;
  std::vector<Version> versions;  // oldest first; back() is the latest
  std::vector<VersionNodeRef> version_nodes;
};

struct LeafEntry {
  std::string key;  // relative to the node's accumulated key prefix
  bool out_of_line = false;
  std::string value;             // inline value
  uint64_t file = 0, offset = 0;  // out-of-line value: files[file], [offset, offset + length)
  uint64_t length = 0;            // value length (inline or out of line)
};

struct InteriorEntry {
  std::string key;  // inclusive lower bound of the child's keys, relative to the node prefix
  uint64_t subtree_common_prefix_length = 0;  // bytes of `key` every key of the child shares
  NodeRef child;
};

struct BtreeNode {
  uint8_t height = 0;  // 0 = leaf
  std::vector<DataFile> files;
  std::vector<LeafEntry> leaf;          // height 0
  std::vector<InteriorEntry> interior;  // height > 0
};

// ---- Codecs ----

// `encoded` is the whole manifest.ocdbt. A numbered-kind manifest decodes to its config only.
Result<Manifest> DecodeManifest(std::string_view encoded);
Result<std::string> EncodeManifest(const Manifest& m, bool zstd);

// `transitive_path` is the base path of the reference that led to this node ("" from a
// manifest); it prefixes every base path of the node's table.
Result<BtreeNode> DecodeBtreeNode(std::string_view encoded, const std::string& transitive_path,
                                  uint64_t max_decoded_node_bytes);
// Entries must already be sorted by key; file indexes refer to node.files, which is encoded as
// given (sorted and without duplicates, as TensorStore requires).
Result<std::string> EncodeBtreeNode(const BtreeNode& node, bool zstd, int zstd_level);

// ---- Reading a database ----

// Reads the latest version of the database in `db_dir` (which holds manifest.ocdbt) and adds
// every key to `out` (a key already there is an error: unions of per-process databases must
// be disjoint). Data files are registered in `files`. Node reads are checked end to end.
Status ReadDatabase(const std::string& db_dir, FileSet* files,
                    std::map<std::string, StoredValue>* out);

// ---- Writing a database ----

struct WriterOptions {
  bool zstd_nodes = true;  // compress nodes and the manifest (zstd level 0 = default)
  // Entries per B+tree node; smaller values give multi-level trees (a test hook: Orbax's
  // items fit one leaf).
  uint64_t max_node_entries = kMaxNodeEntries;
};

// Writes a new database (one generation) into `db_dir`, which must exist and hold no
// manifest.ocdbt. Values longer than 1024 bytes go out of line into one data file d/<hex> as
// they are put; Commit() appends the nodes, then writes manifest.ocdbt atomically, last.
class DatabaseWriter {
 public:
  static Result<std::unique_ptr<DatabaseWriter>> Create(const std::string& db_dir,
                                                        const WriterOptions& o = {});
  ~DatabaseWriter();
  Status Put(std::string key, std::string_view value);
  Status Commit();

 private:
  DatabaseWriter(std::string dir, std::string data_rel, AtomicFile data, WriterOptions o);
  Status Append(std::string_view bytes);

  std::string dir_, data_rel_;
  AtomicFile data_;
  WriterOptions opts_;
  uint64_t data_size_ = 0;
  uint64_t indirect_bytes_ = 0;
  std::vector<LeafEntry> entries_;
  bool committed_ = false;
};

// Random lowercase hex, 2·n_bytes digits (data-file names, uuids).
std::string RandomHex(size_t n_bytes);

}  // namespace gk::orbax::ocdbt
