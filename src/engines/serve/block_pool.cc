#include "engines/serve/block_pool.h"

#include "util/result.h"

namespace gk {

BlockPool::BlockPool(int64_t num_blocks) : blocks_(size_t(num_blocks)) {
  for (int32_t b = 0; b < int32_t(num_blocks); ++b) PushBack(b);
}

void BlockPool::PushBack(int32_t b) {
  Block& k = blocks_[size_t(b)];
  k.prev = tail_;
  k.next = -1;
  k.queued = true;
  if (tail_ >= 0) {
    blocks_[size_t(tail_)].next = b;
  } else {
    head_ = b;
  }
  tail_ = b;
  ++num_free_;
}

void BlockPool::Unlink(int32_t b) {
  Block& k = blocks_[size_t(b)];
  GK_ASSERT(k.queued);
  if (k.prev >= 0) {
    blocks_[size_t(k.prev)].next = k.next;
  } else {
    head_ = k.next;
  }
  if (k.next >= 0) {
    blocks_[size_t(k.next)].prev = k.prev;
  } else {
    tail_ = k.prev;
  }
  k.prev = k.next = -1;
  k.queued = false;
  --num_free_;
}

void BlockPool::Evict(int32_t b) {
  Block& k = blocks_[size_t(b)];
  if (!k.hashed) return;
  auto it = cached_.find(k.hash);
  if (it != cached_.end() && it->second == b) cached_.erase(it);
  k.hashed = false;
}

std::vector<int32_t> BlockPool::Allocate(int64_t n) {
  std::vector<int32_t> out;
  if (n > num_free_) return out;
  out.reserve(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    const int32_t b = head_;
    Unlink(b);
    Evict(b);
    blocks_[size_t(b)].refs = 1;
    out.push_back(b);
  }
  return out;
}

void BlockPool::Free(int32_t b) {
  Block& k = blocks_[size_t(b)];
  GK_ASSERT(k.refs > 0);
  if (--k.refs == 0) PushBack(b);
}

void BlockPool::Free(const std::vector<int32_t>& blocks) {
  for (int32_t b : blocks) {
    if (b >= 0) Free(b);
  }
}

std::optional<int32_t> BlockPool::Lookup(uint64_t hash) const {
  auto it = cached_.find(hash);
  if (it == cached_.end()) return std::nullopt;
  return it->second;
}

void BlockPool::Touch(int32_t b) {
  Block& k = blocks_[size_t(b)];
  if (k.queued) Unlink(b);
  ++k.refs;
}

void BlockPool::Cache(int32_t b, uint64_t hash) {
  Block& k = blocks_[size_t(b)];
  if (k.hashed || cached_.count(hash)) return;
  k.hashed = true;
  k.hash = hash;
  cached_.emplace(hash, b);
}

}  // namespace gk
