// Safetensors: read (single file or sharded directory via model.safetensors.index.json) and
// write (streamed, atomic, optionally sharded with an index).
//
// Format: 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the data region; offsets are relative to the start of the data region.
// Reading validates everything before any byte is used: header length within the file,
// valid JSON, known dtype, offsets in range and non-overlapping, byte size = product(shape)
// × dtype size. Tensors are read with pread into caller-owned buffers (the engine copies
// weights into anonymous memory) or viewed through a read-only mmap (tools that touch each
// tensor once: conversion, merge).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tensor/dtype.h"
#include "util/result.h"

namespace gk {

struct TensorInfo {
  std::string name;
  DType dtype = DType::kUnknown;
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // absolute byte offset in its file
  uint64_t nbytes = 0;
  int file_index = 0;   // which shard (index into SafetensorsSet::files())

  int64_t numel() const;
};

// One .safetensors file.
class SafetensorsFile {
 public:
  static Result<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  uint64_t file_size() const { return file_size_; }

  // Copies the tensor's bytes into dst (dst must hold info.nbytes).
  Status ReadInto(const TensorInfo& info, void* dst) const;
  // Read-only view through an mmap made on first use; valid while this object lives.
  Result<const uint8_t*> Map(const TensorInfo& info) const;
  // Asks the kernel to start reading the tensor's bytes now (posix_fadvise WILLNEED), so that a
  // streaming reader's next ReadInto overlaps with its current work. A hint: never fails.
  void Prefetch(const TensorInfo& info) const;

 private:
  friend class SafetensorsSet;  // sets TensorInfo::file_index when a file joins a set
  SafetensorsFile() = default;
  // Open without the GuardedParse around it (util/guarded_parse.h).
  static Result<std::unique_ptr<SafetensorsFile>> OpenUnguarded(const std::string& path);
  std::string path_;
  int fd_ = -1;
  uint64_t file_size_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
  mutable std::mutex map_mu_;  // guards the lazy mmap: tensors may be mapped from many threads
  mutable void* map_ = nullptr;
};

// All tensors of a checkpoint directory (or of one file): model.safetensors, or the shards
// listed by model.safetensors.index.json, or a single path given directly.
class SafetensorsSet {
 public:
  static Result<SafetensorsSet> Open(const std::string& dir_or_file);

  const TensorInfo* Find(const std::string& name) const;  // nullptr when absent
  std::vector<std::string> Names() const;                 // sorted
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  Status ReadInto(const TensorInfo& info, void* dst) const;
  Result<const uint8_t*> Map(const TensorInfo& info) const;

 private:
  // Appends a file and indexes its tensors; a name already indexed is an error.
  Status Add(std::unique_ptr<SafetensorsFile> file);

  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, TensorInfo> index_;
};

// A tensor to write: its bytes come from `fill`, called once, in header order, with a buffer
// of exactly numel × dtype size bytes. Streaming keeps peak memory at one tensor.
struct TensorSpec {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::function<Status(uint8_t* dst, size_t nbytes)> fill;
};

// Writes one file atomically. Tensors are written in the given order.
Status WriteSafetensors(const std::string& path, const std::vector<TensorSpec>& tensors,
                        const std::map<std::string, std::string>& metadata = {});

// Writes `dir`/model.safetensors, or, when the total exceeds max_shard_bytes,
// model-00001-of-0000N.safetensors ... plus model.safetensors.index.json, each atomically.
// on_file, when given, is called with each file's path once it is complete.
Status WriteSafetensorsDir(const std::string& dir, const std::vector<TensorSpec>& tensors,
                           uint64_t max_shard_bytes,
                           const std::map<std::string, std::string>& metadata = {},
                           const std::function<void(const std::string&)>& on_file = nullptr);

}  // namespace gk
