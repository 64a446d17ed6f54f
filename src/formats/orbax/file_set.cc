#include "formats/orbax/file_set.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace gk::orbax {

FileSet::~FileSet() {
  for (int fd : fds_) {
    if (fd >= 0) ::close(fd);
  }
}

int32_t FileSet::Add(const std::string& path) {
  auto it = ids_.find(path);
  if (it != ids_.end()) return it->second;
  const auto id = int32_t(paths_.size());
  paths_.push_back(path);
  ids_.emplace(path, id);
  std::lock_guard<std::mutex> lock(mu_);
  fds_.push_back(-1);
  sizes_.push_back(-1);
  return id;
}

Result<int> FileSet::Fd(int32_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t i = size_t(id);
  if (fds_[i] >= 0) return fds_[i];
  const int fd = ::open(paths_[i].c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Result<int>::Error(StrCat(paths_[i], ": cannot open: ", std::strerror(errno)));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Result<int>::Error(StrCat(paths_[i], ": not a regular file"));
  }
  fds_[i] = fd;
  sizes_[i] = int64_t(st.st_size);
  return fd;
}

Result<uint64_t> FileSet::FileSize(int32_t id) const {
  GK_ASSIGN_OR_RETURN(int fd, Fd(id));
  (void)fd;
  std::lock_guard<std::mutex> lock(mu_);
  return uint64_t(sizes_[size_t(id)]);
}

Status FileSet::Read(int32_t id, uint64_t offset, uint64_t n, void* dst) const {
  GK_ASSIGN_OR_RETURN(int fd, Fd(id));
  GK_ASSIGN_OR_RETURN(uint64_t size, FileSize(id));
  const std::string& p = paths_[size_t(id)];
  if (offset > size || n > size - offset) {
    return Status::Error(StrCat(p, ": bytes [", offset, ", ", offset + n, ") lie past the end of the ",
                                size, "-byte file; it is truncated or the reference is corrupt"));
  }
  auto* out = static_cast<uint8_t*>(dst);
  while (n > 0) {
    const ssize_t r = ::pread(fd, out, n, off_t(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status::Error(StrCat(p, ": read of ", n, " bytes at offset ", offset, " failed: ",
                                  std::strerror(errno)));
    }
    if (r == 0) {
      return Status::Error(StrCat(p, ": unexpected end of file at offset ", offset, " (", n,
                                  " more bytes expected); the file shrank while open"));
    }
    out += r;
    n -= uint64_t(r);
    offset += uint64_t(r);
  }
  return Status::Ok();
}

Status ReadValue(const FileSet& files, const StoredValue& v, uint64_t offset, uint64_t n, void* dst) {
  if (offset > v.size() || n > v.size() - offset) {
    return Status::Error(StrCat("read of bytes [", offset, ", ", offset + n, ") of a ", v.size(),
                                "-byte value"));  // our bug: callers check ranges first
  }
  if (n == 0) return Status::Ok();
  if (v.file < 0) {
    std::memcpy(dst, v.inline_bytes.data() + offset, n);
    return Status::Ok();
  }
  return files.Read(v.file, v.offset + offset, n, dst);
}

}  // namespace gk::orbax
