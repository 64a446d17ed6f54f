#include "model/kv_cache.h"

#include <sys/mman.h>

#include <cstring>
#include <new>
#include <utility>

namespace gk {
namespace {

constexpr size_t kHugePage = size_t(2) << 20;

}  // namespace

KvBuffer::KvBuffer(size_t bytes) {
  if (bytes == 0) return;
  // Large buffers get a 2 MiB-aligned start so the kernel can back them with huge pages.
  const size_t align = bytes >= kHugePage ? kHugePage : 0;
  map_bytes_ = bytes + align;
  map_ = ::mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    map_bytes_ = 0;
    throw std::bad_alloc();
  }
  uintptr_t start = reinterpret_cast<uintptr_t>(map_);
  if (align) start = (start + align - 1) & ~uintptr_t(align - 1);
  data_ = reinterpret_cast<std::byte*>(start);
  size_ = bytes;
  if (align) ::madvise(data_, bytes, MADV_HUGEPAGE);
}

KvBuffer::KvBuffer(const KvBuffer& other) : KvBuffer(other.size_) {
  if (size_) std::memcpy(data_, other.data_, size_);
}

KvBuffer& KvBuffer::operator=(const KvBuffer& other) {
  if (this != &other) {
    KvBuffer copy(other);
    Swap(copy);
  }
  return *this;
}

KvBuffer::~KvBuffer() {
  if (map_) ::munmap(map_, map_bytes_);
}

void KvBuffer::Swap(KvBuffer& other) noexcept {
  std::swap(data_, other.data_);
  std::swap(size_, other.size_);
  std::swap(map_, other.map_);
  std::swap(map_bytes_, other.map_bytes_);
}

}  // namespace gk
