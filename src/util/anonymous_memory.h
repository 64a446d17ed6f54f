// Page-aligned anonymous memory with transparent huge pages requested: weights, quantized
// weights. A private copy streams faster and steadier than an mmap of the page cache and
// cannot be evicted under memory pressure.
#pragma once

#include <cstddef>
#include <memory>

namespace gk {

// nullptr when the mapping fails. Pages are committed on first write.
std::shared_ptr<void> AllocateAnonymous(size_t bytes);

}  // namespace gk
