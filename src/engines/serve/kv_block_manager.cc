#include "engines/serve/kv_block_manager.h"

#include <algorithm>

namespace gk {
namespace {

constexpr int kFull = 0, kSliding = 1;

// splitmix64's finaliser: a strong 64-bit mix, so chained hashes of different prefixes collide
// with probability ~2^-64 per pair.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t BlockHash(uint64_t parent, const int32_t* tokens, int n) {
  uint64_t h = Mix(parent ^ 0x5bd1e995u);
  for (int i = 0; i < n; ++i) h = Mix(h ^ uint32_t(tokens[i]));
  return h;
}

}  // namespace

KvBlockManager::KvBlockManager(const KvBlockManagerOptions& o)
    : pools_{BlockPool(o.num_blocks[0]), BlockPool(o.num_blocks[1])},
      block_size_(o.block_size),
      window_(o.sliding_window),
      prefix_caching_(o.prefix_caching) {}

uint64_t KvBlockManager::SaltHash(std::string_view cache_salt, uint64_t lora_id) {
  uint64_t h = 0x243f6a8885a308d3ull;
  for (unsigned char c : cache_salt) h = Mix(h ^ c);
  return lora_id == 0 ? h : Mix(h ^ Mix(lora_id ^ 0x13198a2e03707344ull));
}

int64_t KvBlockManager::SlidingFirstBlock(int64_t pos) const {
  return std::max<int64_t>(0, pos - window_ + 1) / block_size_;
}

void KvBlockManager::ExtendHashes(SeqBlocks& s, const std::vector<int32_t>& tokens, int64_t full_blocks) const {
  for (int64_t i = int64_t(s.hashes.size()); i < full_blocks; ++i) {
    const uint64_t parent = i == 0 ? s.salt : s.hashes[size_t(i - 1)];
    s.hashes.push_back(BlockHash(parent, tokens.data() + i * block_size_, block_size_));
  }
}

int64_t KvBlockManager::TakeCachedPrefix(const std::vector<int32_t>& tokens, SeqBlocks& s) {
  if (!prefix_caching_ || tokens.empty()) return 0;
  queries_ += tokens.size();
  const int64_t max_blocks = (int64_t(tokens.size()) - 1) / block_size_;
  ExtendHashes(s, tokens, max_blocks);
  int64_t n = 0;
  if (has_group(kFull)) {
    while (n < max_blocks && pools_[kFull].Lookup(s.hashes[size_t(n)])) ++n;
  } else {
    n = max_blocks;
  }
  // The sliding group needs the blocks inside the window of the first uncached position.
  if (has_group(kSliding)) {
    for (; n > 0; --n) {
      bool ok = true;
      for (int64_t i = SlidingFirstBlock(n * block_size_); i < n && ok; ++i) {
        ok = pools_[kSliding].Lookup(s.hashes[size_t(i)]).has_value();
      }
      if (ok) break;
    }
  }
  if (n == 0) return 0;
  if (has_group(kFull)) {
    for (int64_t i = 0; i < n; ++i) {
      const int32_t b = *pools_[kFull].Lookup(s.hashes[size_t(i)]);
      pools_[kFull].Touch(b);
      s.table[kFull].push_back(b);
    }
  }
  if (has_group(kSliding)) {
    const int64_t first = SlidingFirstBlock(n * block_size_);
    for (int64_t i = 0; i < n; ++i) {
      int32_t b = -1;
      if (i >= first) {
        b = *pools_[kSliding].Lookup(s.hashes[size_t(i)]);
        pools_[kSliding].Touch(b);
      }
      s.table[kSliding].push_back(b);
    }
  }
  s.cached_blocks = n;
  hits_ += uint64_t(n * block_size_);
  return n * block_size_;
}

bool KvBlockManager::Reserve(SeqBlocks& s, int64_t computed, int64_t end) {
  const int64_t need_blocks = (end + block_size_ - 1) / block_size_;
  if (has_group(kSliding)) {  // blocks no new token can see go back to the pool first
    auto& t = s.table[kSliding];
    const int64_t first = std::min<int64_t>(SlidingFirstBlock(computed), int64_t(t.size()));
    for (int64_t i = first - 1; i >= 0 && t[size_t(i)] >= 0; --i) {
      pools_[kSliding].Free(t[size_t(i)]);
      t[size_t(i)] = -1;
    }
  }
  int64_t missing[2] = {0, 0};
  for (int g : {kFull, kSliding}) {
    if (!has_group(g)) continue;
    missing[g] = std::max<int64_t>(0, need_blocks - int64_t(s.table[size_t(g)].size()));
    if (missing[g] > pools_[size_t(g)].num_free()) return false;
  }
  for (int g : {kFull, kSliding}) {
    if (missing[g] == 0) continue;
    const std::vector<int32_t> got = pools_[size_t(g)].Allocate(missing[g]);
    s.table[size_t(g)].insert(s.table[size_t(g)].end(), got.begin(), got.end());
  }
  return true;
}

void KvBlockManager::CacheFullBlocks(SeqBlocks& s, const std::vector<int32_t>& tokens, int64_t computed) {
  if (!prefix_caching_) return;
  const int64_t full = computed / block_size_;
  ExtendHashes(s, tokens, full);
  for (int64_t i = s.cached_blocks; i < full; ++i) {
    for (int g : {kFull, kSliding}) {
      if (!has_group(g) || i >= int64_t(s.table[size_t(g)].size())) continue;
      const int32_t b = s.table[size_t(g)][size_t(i)];
      if (b >= 0) pools_[size_t(g)].Cache(b, s.hashes[size_t(i)]);
    }
  }
  s.cached_blocks = std::max(s.cached_blocks, full);
}

void KvBlockManager::Release(SeqBlocks& s) {
  for (int g : {kFull, kSliding}) {
    auto& t = s.table[size_t(g)];
    for (auto it = t.rbegin(); it != t.rend(); ++it) {
      if (*it >= 0) pools_[size_t(g)].Free(*it);
    }
    t.clear();
  }
  s.hashes.clear();
  s.cached_blocks = 0;
}

}  // namespace gk
