#include "util/anonymous_memory.h"

#include <sys/mman.h>

namespace gk {

std::shared_ptr<void> AllocateAnonymous(size_t bytes) {
  if (bytes == 0) bytes = 1;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  ::madvise(p, bytes, MADV_HUGEPAGE);
  return std::shared_ptr<void>(p, [bytes](void* q) { ::munmap(q, bytes); });
}

}  // namespace gk
