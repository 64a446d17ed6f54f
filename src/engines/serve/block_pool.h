// A pool of KV-cache blocks of one group (PagedAttention style), with reference counts and the
// prefix cache's bookkeeping, as vLLM V1's BlockPool:
// - Every block with no reference sits in the free queue, oldest first. Allocation takes from
//   the head; a cached block taken there is evicted (its hash forgotten), so eviction is LRU.
// - A freed block goes to the tail with its hash kept: until it is evicted, a request with the
//   same prefix can take it back (Touch), which removes it from the queue again.
// - Blocks are hashed only once full; the map keeps the first block cached for a hash.
// Not thread-safe: the engine thread owns it.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

namespace gk {

class BlockPool {
 public:
  explicit BlockPool(int64_t num_blocks);

  int64_t num_blocks() const { return int64_t(blocks_.size()); }
  int64_t num_free() const { return num_free_; }  // in the free queue (cached or not)
  int64_t num_used() const { return num_blocks() - num_free_; }

  // Takes n blocks from the head of the free queue (evicting cached ones), each with one
  // reference. Empty when fewer than n are free (nothing taken).
  std::vector<int32_t> Allocate(int64_t n);
  // Drops one reference of each block; blocks left unreferenced join the free queue's tail in
  // the order given (callers pass a request's blocks last-first, so its tail is evicted first).
  void Free(const std::vector<int32_t>& blocks);
  void Free(int32_t block);

  // The block cached for `hash`, if any.
  std::optional<int32_t> Lookup(uint64_t hash) const;
  // Adds one reference to a block (a prefix-cache hit); takes it out of the free queue.
  void Touch(int32_t block);
  // Records that a full block holds the content `hash` (no-op when the hash is cached already
  // or the block has a hash).
  void Cache(int32_t block, uint64_t hash);

  int ref_count(int32_t block) const { return blocks_[size_t(block)].refs; }

 private:
  struct Block {
    int refs = 0;
    bool hashed = false;
    uint64_t hash = 0;
    int32_t prev = -1, next = -1;  // free queue links
    bool queued = false;
  };
  void PushBack(int32_t b);
  void Unlink(int32_t b);
  void Evict(int32_t b);

  std::vector<Block> blocks_;
  int32_t head_ = -1, tail_ = -1;
  int64_t num_free_ = 0;
  std::unordered_map<uint64_t, int32_t> cached_;
};

}  // namespace gk
