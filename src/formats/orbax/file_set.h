// Files an Orbax item reads from (OCDBT data files, plain-zarr chunk files), opened on first use
// and kept open, read with pread. Thread-safe: Read may be called from many threads.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "util/result.h"

namespace gk::orbax {

class FileSet;

// One stored value of a key-value store (OCDBT or a plain directory): inline bytes, or a byte
// range of a file registered in a FileSet.
struct StoredValue {
  std::string inline_bytes;  // when file < 0
  int32_t file = -1;
  uint64_t offset = 0, length = 0;
  uint64_t size() const { return file < 0 ? inline_bytes.size() : length; }
};

// Reads `n` bytes at `offset` within a stored value.
Status ReadValue(const FileSet& files, const StoredValue& v, uint64_t offset, uint64_t n, void* dst);

class FileSet {
 public:
  FileSet() = default;
  FileSet(const FileSet&) = delete;
  FileSet& operator=(const FileSet&) = delete;
  ~FileSet();

  // Registers a path (no I/O) and returns its id; the same path gets the same id.
  int32_t Add(const std::string& path);
  const std::string& path(int32_t id) const { return paths_[size_t(id)]; }
  size_t size() const { return paths_.size(); }

  Result<uint64_t> FileSize(int32_t id) const;
  // Reads exactly n bytes at offset; a short file is an error naming the path and range.
  Status Read(int32_t id, uint64_t offset, uint64_t n, void* dst) const;

 private:
  Result<int> Fd(int32_t id) const;

  std::vector<std::string> paths_;
  std::map<std::string, int32_t> ids_;
  mutable std::mutex mu_;
  mutable std::vector<int> fds_;  // -1 until opened
  mutable std::vector<int64_t> sizes_;  // -1 until known
};

}  // namespace gk::orbax
