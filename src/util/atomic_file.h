// Atomic file writes: data goes to a temporary file beside the target, is fsynced, then
// renamed over the target (and the directory fsynced), so a kill leaves either the old file
// or the complete new one, never a torn write.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "util/result.h"

namespace gk {

class AtomicFile {
 public:
  static Result<AtomicFile> Create(const std::string& path);
  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile& operator=(AtomicFile&&) = delete;
  AtomicFile(const AtomicFile&) = delete;
  ~AtomicFile();  // removes the temporary file unless Commit() succeeded

  Status Write(const void* data, size_t n);
  Status Write(std::string_view s) { return Write(s.data(), s.size()); }
  Status Commit();
  const std::string& path() const { return path_; }

 private:
  AtomicFile(std::string path, std::string tmp, int fd) : path_(std::move(path)), tmp_(std::move(tmp)), fd_(fd) {}
  std::string path_, tmp_;
  int fd_ = -1;
  uint64_t written_ = 0, flushed_ = 0;  // bytes written; bytes whose writeback was started
};

// Whole-file helpers.
Status WriteFileAtomic(const std::string& path, std::string_view contents);

// fsync of a directory makes the entries created or renamed in it durable; without it a power
// loss could undo a rename that the caller already relied on.
Status FsyncDir(const std::string& dir);

// Removes a temporary directory (recursively) when it goes out of scope, unless Release() was
// called because the directory was moved into place.
class TmpDirGuard {
 public:
  explicit TmpDirGuard(std::string path) : path_(std::move(path)) {}
  ~TmpDirGuard();
  TmpDirGuard(const TmpDirGuard&) = delete;
  TmpDirGuard& operator=(const TmpDirGuard&) = delete;
  void Release() { path_.clear(); }

 private:
  std::string path_;
};

// Refuses what is not a file to read: a directory, or a device (a checkpoint from the internet
// may hold a symlink to /dev/zero or /dev/urandom, which would be read until memory runs out).
// Pipes are read, so `--config <(command)` works.
Status CheckReadableFile(const std::string& path);
// The whole file, after CheckReadableFile.
Result<std::string> ReadFile(const std::string& path);

}  // namespace gk
