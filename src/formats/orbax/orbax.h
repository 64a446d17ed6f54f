// Orbax checkpoints (TPU training runs: Orbax CheckpointManager, Tunix SFT), read and written
// natively. Layout and formats: ../shared/spec/orbax.md; short version in docs/BRIDGE.md.
//
//   <root>/<step>/                       a step; <step>.orbax-checkpoint-tmp/ while in flight
//     _CHECKPOINT_METADATA               JSON: item handlers, timestamps, custom metadata
//     orbax.checkpoint, commit_success.txt   markers (Orbax v1 layout; new Orbax)
//     <item>/                            a PyTree item (model_params, optimizer_state, state)
//       _METADATA                        JSON tree metadata: every leaf's key path
//       _sharding, array_metadatas/      informational
//       manifest.ocdbt, d/<hex>          OCDBT database of zarr keys (the default layout)
//       ocdbt.process_<i>/               per-host databases the root one points into
//       <param>/.zarray | zarr.json ...  plain zarr directories (use_ocdbt=False)
//
// An Item lists its arrays (name = tree path joined with ".", dtype and shape from the zarr
// metadata) and reads any of them whole. The writer emits what Orbax itself would restore:
// one OCDBT database per item (no per-process databases) or plain zarr directories, zarr v2
// or zarr3, every chunk present, through the temporary-directory commit protocol.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tensor/dtype.h"
#include "util/result.h"

namespace gk::orbax {

struct ArrayInfo {
  std::string name;               // tree path joined with "." (e.g. "layer_0.attn.q_einsum.w")
  std::vector<std::string> path;  // the tree path's keys, from _METADATA (else `name` split on ".")
  std::vector<int> key_types;     // per key: 1 sequence index, 2 dict key / attribute (_METADATA)
  DType dtype = DType::kUnknown;  // kUnknown: stored dtype has no gemmakit equivalent (Read fails)
  std::vector<int64_t> shape;
  std::string stored_dtype;          // as in the zarr metadata: "<f4", "bfloat16", "int32"
  std::vector<int64_t> chunk_shape;  // the stored chunk grid (zarr3: the shard shape)

  int64_t numel() const;
  uint64_t nbytes() const { return uint64_t(numel()) * DTypeSize(dtype); }
};

struct OpenOptions {
  // An item with ocdbt.process_* databases but no root manifest.ocdbt was never merged (old
  // Orbax, google/orbax#924). Orbax refuses it; with this set we read the union instead.
  bool read_unmerged_process_databases = false;
};

// One PyTree item directory, e.g. STEP/model_params: OCDBT or plain zarr, zarr v2 or zarr3.
class Item {
 public:
  static Result<std::unique_ptr<Item>> Open(const std::string& item_dir);
  static Result<std::unique_ptr<Item>> Open(const std::string& item_dir, const OpenOptions& o);
  ~Item();

  const std::string& dir() const;
  const std::vector<ArrayInfo>& arrays() const;  // sorted by name
  const ArrayInfo* Find(const std::string& name) const;
  // Whole array, row-major (C order), stored dtype: exactly a.nbytes() bytes at dst.
  // Memory: one chunk buffer at most, plus 1 MiB of compressed input at a time.
  Status Read(const ArrayInfo& a, void* dst) const;
  const nlohmann::json& tree_metadata() const;  // parsed _METADATA (null when absent)
  bool ocdbt() const;
  int zarr_format() const;  // 2 or 3 (of the first array; 0 for an empty item)

 private:
  struct Impl;
  explicit Item(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct StepInfo {
  int64_t step = -1;  // from the directory name ("23", "step_23", "0023"); -1 if it has none
  std::string dir;
  // Item subdirectories, sorted; {"."} when the step directory is itself a PyTree item (a
  // direct save, e.g. StandardCheckpointer.save(path, tree)).
  std::vector<std::string> items;
  // The subset of `items` that are PyTree items (by their handler in _CHECKPOINT_METADATA, else
  // by their files); the others are JSON items (metadata, data.json) and the like.
  std::vector<std::string> pytree_items;
  nlohmann::json checkpoint_metadata;  // parsed _CHECKPOINT_METADATA (null when absent)
  bool v1_layout = false;              // has the `orbax.checkpoint` marker

  std::string ItemDir(const std::string& item) const { return item == "." ? dir : dir + "/" + item; }
};

Result<StepInfo> OpenStep(const std::string& step_dir);
// Committed steps only, ascending: directories named by a step number; *.orbax-checkpoint-tmp*
// directories (saves in flight or crashed) are ignored.
Result<std::vector<int64_t>> ListSteps(const std::string& root);
// The directory of `step` under root ("<root>/23", or "<root>/step_23" ...).
Result<std::string> StepDir(const std::string& root, int64_t step);
// A JSON item (JsonCheckpointHandler): <item>/metadata (v0) or <item>/data.json (v1).
Result<nlohmann::json> ReadJsonItem(const std::string& item_dir);

// ---- Writing ----

struct ArraySpec {
  std::vector<std::string> path;  // tree path; the param name is the keys joined with "."
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  // Called once with the whole array (numel × dtype size bytes, C order).
  std::function<Status(uint8_t* dst, size_t nbytes)> fill;
  // Empty: the whole array while it is at most WriteOptions::max_chunk_bytes, else split along
  // axis 0 (then axis 1, ...) into near-equal pieces of at most that size.
  std::vector<int64_t> chunk_shape;
  // Per key of `path`: 1 sequence index, 2 dict key (the default when empty).
  std::vector<int> key_types;
};

struct WriteOptions {
  bool ocdbt = true;    // one OCDBT database per item; false: plain zarr directories
  int zarr_format = 3;  // 3: zarr3 + sharding_indexed (Orbax v1 API); 2: .zarray (v0 API)
  bool zstd = true;     // compress chunks (and OCDBT nodes)
  uint64_t max_chunk_bytes = 64ull << 20;  // default chunking bound
  // Entries per OCDBT B+tree node (smaller values give interior nodes; a test hook).
  uint64_t max_btree_node_entries = 1u << 20;
  nlohmann::json custom_metadata;  // WriteStep: _CHECKPOINT_METADATA["custom_metadata"] ({} if null)
};

// Writes one PyTree item into <item_dir>.orbax-checkpoint-tmp/, then renames it to item_dir
// (which must not exist). Each array's fill runs once, then its chunks are encoded and
// written one at a time.
Status WriteItem(const std::string& item_dir, const std::vector<ArraySpec>& arrays, const WriteOptions& o = {});

// ROOT/<step>/<item>/... with _CHECKPOINT_METADATA, orbax.checkpoint and commit_success.txt,
// through the temporary-directory commit protocol: everything is written into
// ROOT/<step>.orbax-checkpoint-tmp/ (a stale one from a crashed save is removed first), then
// renamed. ROOT/<step> must not exist.
Status WriteStep(const std::string& root, int64_t step,
                 const std::vector<std::pair<std::string, std::vector<ArraySpec>>>& items,
                 const WriteOptions& o = {});

// Python's str() of a tuple of str: "('a',)", "('b', 'c')" (the _METADATA tree keys).
std::string PythonTupleRepr(const std::vector<std::string>& keys);

}  // namespace gk::orbax
