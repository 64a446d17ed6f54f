#include "engines/serve/kv_block_manager.h"

#include <gtest/gtest.h>

#include <numeric>

namespace gk {
namespace {

std::vector<int32_t> Iota(int n, int start = 100) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(BlockPool, AllocatesFreesAndEvictsLeastRecentlyFreed) {
  BlockPool pool(4);
  auto a = pool.Allocate(3);
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_TRUE(pool.Allocate(2).empty());  // all or nothing
  EXPECT_EQ(pool.num_free(), 1);
  pool.Cache(a[0], 11);
  pool.Cache(a[1], 22);
  pool.Free({a[1], a[0]});  // a request's blocks, last first
  EXPECT_EQ(pool.num_free(), 3);
  EXPECT_EQ(pool.Lookup(11), a[0]);
  // Order of the free queue: the never-used block, then a[1], then a[0].
  auto b = pool.Allocate(2);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[1], a[1]);
  EXPECT_FALSE(pool.Lookup(22).has_value());  // evicted when reused
  EXPECT_EQ(pool.Lookup(11), a[0]);
  pool.Touch(a[0]);  // a hit takes it out of the free queue
  EXPECT_EQ(pool.ref_count(a[0]), 1);
  EXPECT_EQ(pool.num_free(), 0);
  pool.Touch(a[0]);
  EXPECT_EQ(pool.ref_count(a[0]), 2);
  pool.Free(a[0]);
  EXPECT_EQ(pool.num_free(), 0);
  pool.Free(a[0]);
  EXPECT_EQ(pool.num_free(), 1);
}

TEST(KvBlockManager, FullGroupPrefixHitLeavesOneTokenToCompute) {
  KvBlockManager m({{8, 0}, 4, 0, true});
  const auto tokens = Iota(12);
  SeqBlocks a;
  EXPECT_EQ(m.TakeCachedPrefix(tokens, a), 0);
  ASSERT_TRUE(m.Reserve(a, 0, 12));
  EXPECT_EQ(a.table[0].size(), 3u);
  m.CacheFullBlocks(a, tokens, 12);
  SeqBlocks b;
  // 12 tokens = 3 full blocks, but the last token must be computed: 2 blocks hit.
  EXPECT_EQ(m.TakeCachedPrefix(tokens, b), 8);
  EXPECT_EQ(b.table[0][0], a.table[0][0]);
  EXPECT_EQ(b.table[0][1], a.table[0][1]);
  EXPECT_EQ(m.pool(0).ref_count(a.table[0][0]), 2);
  // A different salt (tenant) misses.
  SeqBlocks c;
  c.salt = KvBlockManager::SaltHash("tenant-b");
  EXPECT_EQ(m.TakeCachedPrefix(tokens, c), 0);
  // A prompt differing in its second block hits one block.
  auto other = tokens;
  other[5] = 7;
  SeqBlocks d;
  EXPECT_EQ(m.TakeCachedPrefix(other, d), 4);
  m.Release(a);
  m.Release(b);
  m.Release(c);
  m.Release(d);
  EXPECT_EQ(m.used_blocks(0), 0);
  EXPECT_EQ(m.hits(), 12u);
  EXPECT_EQ(m.queries(), 48u);
}

TEST(KvBlockManager, SlidingGroupKeepsOnlyTheWindow) {
  // Window 8, blocks of 4: a token at p sees [p-7, p].
  KvBlockManager m({{100, 100}, 4, 8, true});
  SeqBlocks s;
  ASSERT_TRUE(m.Reserve(s, 0, 20));  // a 20-token prefill: everything is written in one pass
  EXPECT_EQ(m.used_blocks(1), 5);
  // Decoding position 20 sees [13, 20]: blocks 3..5; blocks 0..2 go back.
  ASSERT_TRUE(m.Reserve(s, 20, 21));
  EXPECT_EQ(s.table[1][0], -1);
  EXPECT_EQ(s.table[1][2], -1);
  EXPECT_GE(s.table[1][3], 0);
  EXPECT_EQ(m.used_blocks(1), 3);
  EXPECT_EQ(m.used_blocks(0), 6);
  // Long decode: sliding use stays bounded.
  for (int64_t p = 21; p < 400; ++p) ASSERT_TRUE(m.Reserve(s, p, p + 1));
  EXPECT_LE(m.used_blocks(1), 3);
  EXPECT_EQ(m.used_blocks(0), 100);
  m.Release(s);
  EXPECT_EQ(m.used_blocks(0), 0);
  EXPECT_EQ(m.used_blocks(1), 0);
}

TEST(KvBlockManager, HybridPrefixHitNeedsTheSlidingWindowBlocks) {
  KvBlockManager m({{100, 100}, 4, 8, true});
  const auto tokens = Iota(40);
  SeqBlocks a;
  ASSERT_TRUE(m.Reserve(a, 0, 40));
  m.CacheFullBlocks(a, tokens, 40);
  // Decode far enough that a's early sliding blocks are freed (still cached while unevicted).
  ASSERT_TRUE(m.Reserve(a, 40, 41));
  SeqBlocks b;
  EXPECT_EQ(m.TakeCachedPrefix(tokens, b), 36);  // 9 of 10 blocks: the last token is computed
  // Its sliding table holds only the window of position 36: blocks 7 and 8.
  EXPECT_EQ(b.table[1][6], -1);
  EXPECT_GE(b.table[1][7], 0);
  EXPECT_GE(b.table[1][8], 0);
  m.Release(a);
  m.Release(b);
  // Evict every cached sliding block: the full group still hits but the sliding group cannot,
  // so the usable hit is zero.
  SeqBlocks hog;
  ASSERT_TRUE(m.Reserve(hog, 0, 400));
  m.Release(hog);
  SeqBlocks c;
  EXPECT_EQ(m.TakeCachedPrefix(tokens, c), 0);
  m.Release(c);
}

TEST(KvBlockManager, ReserveIsAllOrNothing) {
  KvBlockManager m({{3, 0}, 4, 0, false});
  SeqBlocks a, b;
  ASSERT_TRUE(m.Reserve(a, 0, 8));
  EXPECT_FALSE(m.Reserve(b, 0, 8));
  EXPECT_TRUE(b.table[0].empty());
  EXPECT_EQ(m.used_blocks(0), 2);
  EXPECT_TRUE(m.Reserve(b, 0, 4));
  m.Release(a);
  m.Release(b);
  EXPECT_EQ(m.used_blocks(0), 0);
}

}  // namespace
}  // namespace gk
