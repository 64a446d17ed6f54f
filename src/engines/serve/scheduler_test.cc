#include "engines/serve/scheduler.h"

#include <gtest/gtest.h>

#include <memory>
#include <numeric>

namespace gk {
namespace {

std::unique_ptr<ScheduledRequest> Request(uint64_t id, int prompt) {
  auto r = std::make_unique<ScheduledRequest>();
  r->id = id;
  r->tokens.resize(static_cast<size_t>(prompt));
  std::iota(r->tokens.begin(), r->tokens.end(), int32_t(id * 1000));
  return r;
}

// What the engine does after a step: the slices are computed, finished prompts get a token.
void Advance(const std::vector<ScheduledSlice>& slices) {
  for (const auto& s : slices) {
    s.request->computed += s.num_tokens;
    if (s.request->computed == int64_t(s.request->tokens.size())) s.request->tokens.push_back(7);
  }
}

TEST(Scheduler, DecodesFirstThenChunkedPrefillUnderTheBudget) {
  KvBlockManager blocks({{1000, 0}, 16, 0, false});
  Scheduler s(&blocks, {64, 8, true});
  auto a = Request(1, 10), b = Request(2, 100), c = Request(3, 5);
  s.Add(a.get());
  auto step = s.Schedule();
  ASSERT_EQ(step.size(), 1u);
  EXPECT_EQ(step[0].num_tokens, 10);
  Advance(step);
  s.Add(b.get());
  s.Add(c.get());
  step = s.Schedule();  // a decodes (1), b gets a 63-token chunk, c waits (budget spent)
  ASSERT_EQ(step.size(), 2u);
  EXPECT_EQ(step[0].request, a.get());
  EXPECT_EQ(step[0].num_tokens, 1);
  EXPECT_EQ(step[1].request, b.get());
  EXPECT_EQ(step[1].num_tokens, 63);
  Advance(step);
  step = s.Schedule();  // a (1) and b's remaining 37 run before c (5) is admitted
  ASSERT_EQ(step.size(), 3u);
  EXPECT_EQ(step[1].num_tokens, 37);
  EXPECT_EQ(step[2].request, c.get());
  EXPECT_EQ(step[2].num_tokens, 5);
}

TEST(Scheduler, WithoutChunkingAPromptWaitsForRoomAndBlocksTheQueue) {
  KvBlockManager blocks({{1000, 0}, 16, 0, false});
  Scheduler s(&blocks, {100, 8, false});
  auto a = Request(1, 10), b = Request(2, 95), c = Request(3, 5);
  s.Add(a.get());
  Advance(s.Schedule());
  s.Add(b.get());
  s.Add(c.get());
  auto step = s.Schedule();  // a decodes (1); b (95) fits whole in the 99 left
  ASSERT_EQ(step.size(), 2u);
  EXPECT_EQ(step[1].num_tokens, 95);
  EXPECT_EQ(s.waiting().front(), c.get());  // c did not overtake: budget left is 4 < 5
}

TEST(Scheduler, SequenceCap) {
  KvBlockManager blocks({{1000, 0}, 16, 0, false});
  Scheduler s(&blocks, {1000, 2, true});
  auto a = Request(1, 3), b = Request(2, 3), c = Request(3, 3);
  s.Add(a.get());
  s.Add(b.get());
  s.Add(c.get());
  EXPECT_EQ(s.Schedule().size(), 2u);
  EXPECT_EQ(s.waiting().size(), 1u);
}

TEST(Scheduler, PreemptsTheNewestRunningRequestAndRecomputesIt) {
  // 4 blocks of 4 tokens; two requests of 7 tokens take 2 blocks each.
  KvBlockManager blocks({{4, 0}, 4, 0, false});
  Scheduler s(&blocks, {100, 8, true});
  auto a = Request(1, 7), b = Request(2, 7);
  s.Add(a.get());
  s.Add(b.get());
  auto step = s.Schedule();
  ASSERT_EQ(step.size(), 2u);
  Advance(step);  // both now hold 8 tokens: the 8th needs no new block
  step = s.Schedule();
  ASSERT_EQ(step.size(), 2u);
  Advance(step);  // 9 tokens each: both need a third block, only one can have it
  step = s.Schedule();
  ASSERT_EQ(step.size(), 1u);
  EXPECT_EQ(step[0].request, a.get());
  ASSERT_EQ(s.preempted().size(), 1u);
  EXPECT_EQ(s.preempted()[0], b.get());
  EXPECT_EQ(b->computed, 0);
  EXPECT_EQ(b->preemptions, 1);
  EXPECT_EQ(s.waiting().front(), b.get());
  Advance(step);
  s.Remove(a.get());  // a finishes: b is readmitted and recomputes prompt + generated tokens
  step = s.Schedule();
  ASSERT_EQ(step.size(), 1u);
  EXPECT_EQ(step[0].request, b.get());
  EXPECT_EQ(step[0].num_tokens, 9);
  s.Remove(b.get());
  EXPECT_EQ(blocks.used_blocks(0), 0);
}

TEST(Scheduler, PrefixHitIsNotChargedToTheBudget) {
  KvBlockManager blocks({{100, 0}, 4, 0, true});
  Scheduler s(&blocks, {100, 8, true});
  auto a = Request(1, 20);
  s.Add(a.get());
  auto step = s.Schedule();
  Advance(step);
  blocks.CacheFullBlocks(a->blocks, a->tokens, a->computed);
  auto b = Request(1, 20);  // same id seed -> same prompt
  s.Add(b.get());
  step = s.Schedule();
  ASSERT_EQ(step.size(), 2u);
  EXPECT_EQ(b->cached_prompt_tokens, 16);
  EXPECT_EQ(step[1].num_tokens, 4);
}

// --max-loras 2: a request of a third adapter waits while two adapters run, the ones behind it
// (base or a running adapter) go past it, and it runs once an adapter's requests are done.
TEST(Scheduler, MaxLorasHoldsBackAThirdAdapter) {
  KvBlockManager blocks({{1000, 0}, 16, 0, false});
  Scheduler s(&blocks, {256, 8, true, 2});
  auto a = Request(1, 4), b = Request(2, 4), c = Request(3, 4), base = Request(4, 4), a2 = Request(5, 4);
  a->lora_id = 10;
  b->lora_id = 20;
  c->lora_id = 30;
  a2->lora_id = 10;
  for (auto* r : {a.get(), b.get(), c.get(), base.get(), a2.get()}) s.Add(r);
  auto step = s.Schedule();
  ASSERT_EQ(step.size(), 4u);
  EXPECT_EQ(step[0].request, a.get());
  EXPECT_EQ(step[1].request, b.get());
  EXPECT_EQ(step[2].request, base.get());  // past c, which waits for a slot
  EXPECT_EQ(step[3].request, a2.get());    // adapter 10 already runs
  ASSERT_EQ(s.waiting().size(), 1u);
  EXPECT_EQ(s.waiting().front(), c.get());
  Advance(step);
  s.Remove(b.get());  // adapter 20's only request finishes: c takes its slot
  step = s.Schedule();
  ASSERT_EQ(step.size(), 4u);
  EXPECT_EQ(step.back().request, c.get());
  EXPECT_TRUE(s.waiting().empty());
}

}  // namespace
}  // namespace gk
