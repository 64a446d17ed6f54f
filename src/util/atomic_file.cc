#include "util/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace gk {
namespace {

std::string Errno() { return std::strerror(errno); }

void FsyncDirOf(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

}  // namespace

Result<AtomicFile> AtomicFile::Create(const std::string& path) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Result<AtomicFile>::Error(StrCat("cannot create ", tmp, ": ", Errno()));
  return AtomicFile(path, tmp, fd);
}

AtomicFile::AtomicFile(AtomicFile&& o) noexcept : path_(std::move(o.path_)), tmp_(std::move(o.tmp_)), fd_(o.fd_), written_(o.written_), flushed_(o.flushed_) {
  o.fd_ = -1;
  o.tmp_.clear();
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

Status AtomicFile::Write(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd_, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return Status::Error(StrCat("writing ", tmp_, ": ", Errno()));
    }
    p += w;
    n -= size_t(w);
    written_ += uint64_t(w);
  }
  // Start writing back each full 64 MiB now instead of when the kernel's dirty threshold (10 %
  // of RAM) or the final fsync forces it: the disk then writes while the caller computes or
  // reads the next part, rather than idling and flushing it all at Commit(). Non-blocking.
  constexpr uint64_t kWritebackChunk = 64ull << 20;
  if (written_ - flushed_ >= kWritebackChunk) {
    const uint64_t end = written_ / kWritebackChunk * kWritebackChunk;
    ::sync_file_range(fd_, off_t(flushed_), off_t(end - flushed_), SYNC_FILE_RANGE_WRITE);
    flushed_ = end;
  }
  return Status::Ok();
}

Status AtomicFile::Commit() {
  if (fd_ < 0) return Status::Error(StrCat("commit of ", path_, " after close"));
  if (::fsync(fd_) != 0) return Status::Error(StrCat("fsync ", tmp_, ": ", Errno()));
  ::close(fd_);
  fd_ = -1;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    return Status::Error(StrCat("rename ", tmp_, " -> ", path_, ": ", Errno()));
  }
  tmp_.clear();
  FsyncDirOf(path_);
  return Status::Ok();
}

Status WriteFileAtomic(const std::string& path, std::string_view contents) {
  GK_ASSIGN_OR_RETURN(AtomicFile f, AtomicFile::Create(path));
  GK_RETURN_IF_ERROR(f.Write(contents));
  return f.Commit();
}

Status CheckReadableFile(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Status::Error(StrCat("cannot open ", path, ": ", Errno()));
  if (S_ISDIR(st.st_mode)) return Status::Error(StrCat("cannot read ", path, ": it is a directory"));
  if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
    return Status::Error(StrCat("cannot read ", path, ": it is a device, not a file"));
  }
  return Status::Ok();
}

Result<std::string> ReadFile(const std::string& path) {
  GK_RETURN_IF_ERROR(CheckReadableFile(path));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Result<std::string>::Error(StrCat("cannot open ", path, ": ", Errno()));
  std::string out;
  struct stat st;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) out.reserve(static_cast<size_t>(st.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string err = Errno();
      ::close(fd);
      return Result<std::string>::Error(StrCat("cannot read ", path, ": ", err));
    }
    if (n == 0) break;
    out.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

Status FsyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Status::Error(StrCat("cannot open directory ", dir, " to fsync it: ", Errno()));
  const int rc = ::fsync(fd);
  const std::string err = Errno();
  ::close(fd);
  if (rc != 0) return Status::Error(StrCat("fsync of directory ", dir, ": ", err));
  return Status::Ok();
}

TmpDirGuard::~TmpDirGuard() {
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace gk
