// Per-request block tables over the two KV groups of a Gemma model (full-attention layers and
// sliding-window layers; model/paged_kv.h), with vLLM's hybrid-cache rules:
// - full layers keep a block for every position;
// - sliding layers keep only the blocks that a new token can still see; older ones go back to
//   the pool (their table entries become -1), so a long request costs the window, not its length;
// - prefix caching on full blocks: block i's hash chains the hash of block i-1 with its tokens
//   (and a per-tenant salt); a prompt's hit is the longest run of cached leading blocks in the
//   full group for which the sliding group also still holds the blocks inside the window.
// Not thread-safe: the engine thread owns it.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "engines/serve/block_pool.h"

namespace gk {

// One request's blocks.
struct SeqBlocks {
  std::array<std::vector<int32_t>, 2> table;  // per group: logical block -> pool block (-1: freed)
  std::vector<uint64_t> hashes;               // hashes of leading full blocks of the tokens
  int64_t cached_blocks = 0;                  // leading blocks registered in (or taken from) the cache
  uint64_t salt = 0;                          // hash seed (cache_salt)
};

struct KvBlockManagerOptions {
  int64_t num_blocks[2] = {0, 0};  // per group; 0 for a group the model does not have
  int block_size = 16;
  int64_t sliding_window = 0;      // 0: no sliding group
  bool prefix_caching = true;
};

class KvBlockManager {
 public:
  explicit KvBlockManager(const KvBlockManagerOptions& o);

  int block_size() const { return block_size_; }
  bool has_group(int g) const { return pools_[size_t(g)].num_blocks() > 0; }
  const BlockPool& pool(int g) const { return pools_[size_t(g)]; }

  // The first block's parent hash: the request's cache_salt and its LoRA adapter (0: the base
  // model, whose hashes do not change), so tenants and adapters never share blocks.
  static uint64_t SaltHash(std::string_view cache_salt, uint64_t lora_id = 0);

  // For a request with no blocks yet: takes the longest usable cached prefix of `tokens` (at
  // most tokens.size() - 1 tokens, so that the last one is computed and gives logits) and
  // returns how many tokens it covers. Counts the query and the hit.
  int64_t TakeCachedPrefix(const std::vector<int32_t>& tokens, SeqBlocks& s);

  // Makes positions [computed, end) writable: allocates missing blocks and, in the sliding
  // group, frees those wholly before the window of position `computed`. False (and nothing
  // allocated) when a group has too few free blocks.
  bool Reserve(SeqBlocks& s, int64_t computed, int64_t end);

  // Registers the full blocks among the first `computed` tokens in the prefix cache.
  void CacheFullBlocks(SeqBlocks& s, const std::vector<int32_t>& tokens, int64_t computed);

  // Frees all of a request's blocks (last first, so that its tail is evicted first).
  void Release(SeqBlocks& s);

  int64_t used_blocks(int g) const { return pools_[size_t(g)].num_used(); }
  int64_t total_blocks(int g) const { return pools_[size_t(g)].num_blocks(); }
  uint64_t queries() const { return queries_; }
  uint64_t hits() const { return hits_; }

 private:
  void ExtendHashes(SeqBlocks& s, const std::vector<int32_t>& tokens, int64_t full_blocks) const;
  int64_t SlidingFirstBlock(int64_t pos) const;  // first logical block position `pos` can see

  std::array<BlockPool, 2> pools_;
  int block_size_;
  int64_t window_;
  bool prefix_caching_;
  uint64_t queries_ = 0, hits_ = 0;
};

}  // namespace gk
