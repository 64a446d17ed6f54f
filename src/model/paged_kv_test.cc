// The paged KV path (ForwardPaged over a PagedKvPool) against the contiguous one (ForwardBatch
// over per-sequence KvCaches, itself checked against the PyTorch oracle): the same batches,
// step by step, through a small scheduler that hands out shuffled, reused block ids and frees
// sliding blocks that leave the window. Plus the pool's arithmetic and the errors.
#include "model/paged_kv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <random>

#include "model/gemma_model.h"
#include "model/presets.h"
#include "model/random_init.h"
#include "model/toy_models_test_util.h"

namespace gk {
namespace {

constexpr int kVocab = 300;
constexpr int kWindow = 7;  // shorter than the sequences and than a 16-position block

ModelConfig TestConfig(const std::string& preset) {
  return ToyConfig(preset == "gemma3" ? "gemma3-270m" : preset, kWindow);
}

std::string WriteModel(const ModelConfig& c, const std::string& name, DType dtype) {
  return WriteToyModel(c, "gk_paged_test_" + name, dtype, 5);
}

// A contiguous cache whose layers hold `dtype` (to compare with a pool of that dtype).
KvCache CacheOf(const GemmaModel& model, int64_t max_tokens, DType dtype) {
  KvCache cache = model.NewKvCache(max_tokens);
  for (KvLayer& kv : cache.layers) {
    if (kv.capacity == 0 || kv.dtype == dtype) continue;
    kv.dtype = dtype;
    const size_t bytes = size_t(kv.capacity * kv.kv_heads * kv.head_dim) * kv.ElemBytes();
    kv.k = KvBuffer(bytes);
    kv.v = KvBuffer(bytes);
  }
  return cache;
}

struct Step {
  int seq;
  int n;
  LogitsMode mode;
};

// Runs the same batches through ForwardBatch (contiguous caches) and ForwardPaged (a pool),
// handing out blocks from shuffled free lists and freeing sliding blocks that fall out of
// the window (so they are reused, stale, by other sequences).
class Scheduler {
 public:
  Scheduler(GemmaModel& model, PagedKvPool& pool, const std::vector<std::vector<int32_t>>& tokens, DType cache_dtype,
            uint32_t seed)
      : model_(model), pool_(pool), seqs_(tokens.size()) {
    std::mt19937 rng(seed);
    for (int g = 0; g < 2; ++g) {
      for (int32_t b = 0; b < pool.num_blocks(KvGroup(g)); ++b) free_[g].push_back(b);
      std::shuffle(free_[g].begin(), free_[g].end(), rng);
    }
    for (size_t i = 0; i < tokens.size(); ++i) {
      seqs_[i].tokens = tokens[i];
      seqs_[i].cache = CacheOf(model, int64_t(tokens[i].size()), cache_dtype);
    }
  }

  // One batch; adds the largest |paged - contiguous| and |contiguous| logit to err and ref,
  // appends the paged logits to `paged_logits`.
  void Run(const std::vector<Step>& steps, double* err, double* ref, std::vector<float>* paged_logits) {
    std::vector<BatchItem> contiguous;
    std::vector<PagedBatchItem> paged;
    int64_t rows = 0;
    for (const Step& st : steps) {
      Seq& s = seqs_[size_t(st.seq)];
      const int64_t pos = s.paged.num_tokens;
      ASSERT_LE(pos + st.n, int64_t(s.tokens.size()));
      Reserve(s, pos + st.n);
      const std::span<const int32_t> toks(s.tokens.data() + pos, size_t(st.n));
      contiguous.push_back({toks, &s.cache, st.mode});
      paged.push_back({toks, &s.paged, st.mode});
      rows += st.mode == LogitsMode::kAll ? st.n : st.mode == LogitsMode::kLast ? 1 : 0;
    }
    std::vector<float> a(size_t(rows * kVocab)), b(a.size());
    ASSERT_TRUE(model_.ForwardBatch(contiguous, a.data()).ok());
    const Status s = model_.ForwardPaged(paged, pool_, b.data());
    ASSERT_TRUE(s.ok()) << s.message();
    for (size_t i = 0; i < a.size(); ++i) {
      *err = std::max(*err, double(std::fabs(a[i] - b[i])));
      *ref = std::max(*ref, double(std::fabs(a[i])));
    }
    paged_logits->insert(paged_logits->end(), b.begin(), b.end());
    for (const Step& st : steps) Advance(seqs_[size_t(st.seq)], st.n);
  }

  bool Done(int seq) const { return seqs_[size_t(seq)].paged.num_tokens == int64_t(seqs_[size_t(seq)].tokens.size()); }
  int64_t Left(int seq) const { return int64_t(seqs_[size_t(seq)].tokens.size()) - seqs_[size_t(seq)].paged.num_tokens; }
  int64_t Freed() const { return freed_; }

 private:
  struct Seq {
    std::vector<int32_t> tokens;
    std::vector<int32_t> table[2];
    PagedSequence paged;
    KvCache cache;
  };

  // Block tables covering positions [0, end).
  void Reserve(Seq& s, int64_t end) {
    const int64_t bs = pool_.block_size();
    for (int g = 0; g < 2; ++g) {
      if (!pool_.HasGroup(KvGroup(g))) continue;
      while (int64_t(s.table[g].size()) * bs < end) {
        ASSERT_FALSE(free_[g].empty());
        s.table[g].push_back(free_[g].back());
        free_[g].pop_back();
      }
      s.paged.blocks[g] = s.table[g];
    }
  }

  // The engine's part: advance, then free sliding blocks the next token no longer sees.
  void Advance(Seq& s, int n) {
    s.paged.num_tokens += n;
    const int64_t lo = std::max<int64_t>(0, s.paged.num_tokens - kWindow + 1);
    std::vector<int32_t>& t = s.table[int(KvGroup::kSliding)];
    for (int64_t b = 0; b < lo / pool_.block_size() && b < int64_t(t.size()); ++b) {
      if (t[size_t(b)] < 0) continue;
      free_[int(KvGroup::kSliding)].push_back(t[size_t(b)]);
      t[size_t(b)] = -1;
      ++freed_;
    }
  }

  GemmaModel& model_;
  PagedKvPool& pool_;
  std::vector<Seq> seqs_;
  std::vector<int32_t> free_[2];
  int64_t freed_ = 0;
};

struct ScheduleResult {
  double rel_err = INFINITY;  // max |paged - contiguous| / max |contiguous| over every logit
  int64_t freed = 0;          // sliding blocks freed (and handed out again)
  std::vector<float> paged;   // every step's paged logits
};

// Four sequences: 0 prefills 23 tokens in one pass then decodes; 1 prefills in chunks of 4;
// 2 joins at the third step with chunks of 7; 3 runs token by token from its first token.
// Every step batches whichever are not done, with a mix of logits modes.
// `seed` shuffles the free lists (which block ids each sequence gets).
ScheduleResult RunSchedule(GemmaModel& model, PagedKvPool& pool, DType cache_dtype, uint32_t seed = 17) {
  std::mt19937 rng(3);
  std::vector<std::vector<int32_t>> tokens = {std::vector<int32_t>(45), std::vector<int32_t>(22),
                                              std::vector<int32_t>(38), std::vector<int32_t>(20)};
  for (auto& seq : tokens) {
    for (auto& t : seq) t = int32_t(rng() % kVocab);
    seq[0] = 2;
  }
  Scheduler sched(model, pool, tokens, cache_dtype, seed);
  ScheduleResult r;
  double err = 0, ref = 0;
  for (int step = 0; !(sched.Done(0) && sched.Done(1) && sched.Done(2) && sched.Done(3)); ++step) {
    std::vector<Step> steps;
    if (!sched.Done(3)) steps.push_back({3, 1, LogitsMode::kAll});
    if (!sched.Done(0)) steps.push_back({0, step == 0 ? 23 : 1, LogitsMode::kLast});
    if (!sched.Done(1)) steps.push_back({1, int(std::min<int64_t>(4, sched.Left(1))), LogitsMode::kAll});
    if (step >= 2 && !sched.Done(2)) {
      const int n = int(std::min<int64_t>(7, sched.Left(2)));
      steps.push_back({2, n, n == sched.Left(2) ? LogitsMode::kAll : LogitsMode::kNone});
    }
    std::shuffle(steps.begin(), steps.end(), rng);  // item order must not matter
    sched.Run(steps, &err, &ref, &r.paged);
    if (::testing::Test::HasFatalFailure()) return r;
  }
  r.freed = sched.Freed();
  r.rel_err = err / ref;
  return r;
}

std::unique_ptr<GemmaModel> LoadModel(const std::string& dir, ThreadPool* threads) {
  ModelLoadOptions lo;
  lo.max_chunk = 32;
  auto model = GemmaModel::Load(dir, threads, lo);
  EXPECT_TRUE(model.ok()) << model.message();
  return model.ok() ? std::move(*model) : nullptr;
}

std::unique_ptr<PagedKvPool> MakePool(const ModelConfig& c, int block_size, DType dtype) {
  PagedKvOptions po;
  po.block_size = block_size;
  po.dtype = dtype;
  po.num_blocks[0] = po.num_blocks[1] = 200 / block_size + 4;  // the schedule needs 125 positions
  auto pool = PagedKvPool::Create(c, po);
  EXPECT_TRUE(pool.ok()) << pool.message();
  return pool.ok() ? std::move(*pool) : nullptr;
}

struct PagedCase {
  std::string preset;
  DType model_dtype;
  int block_size;
  DType pool_dtype;  // also the contiguous cache's
};

class PagedForward : public ::testing::TestWithParam<PagedCase> {};

TEST_P(PagedForward, MatchesContiguousCache) {
  const PagedCase& p = GetParam();
  const ModelConfig c = TestConfig(p.preset);
  const std::string dir = WriteModel(c, p.preset + "_" + std::string(DTypeName(p.model_dtype)), p.model_dtype);
  ThreadPool threads(2);
  auto model = LoadModel(dir, &threads);
  auto pool = MakePool(c, p.block_size, p.pool_dtype);
  ASSERT_TRUE(model && pool);
  const ScheduleResult r = RunSchedule(*model, *pool, p.pool_dtype);
  // The kernels restart their 64-position softmax blocks at segment ends, so attention over
  // blocks rounds differently from one ring segment: a few ulps in f32. A 16-bit cache then
  // rounds an occasional K/V element of a later layer the other way (one f16 ulp, 5e-4), which
  // moves the logits by up to ~2e-4; a bf16 cache's ulp is 8x an f16 one (up to ~1.6e-3 was
  // seen); a wrong block would move them by O(1).
  EXPECT_LT(r.rel_err, p.pool_dtype == DType::kF32 ? 1e-5 : p.pool_dtype == DType::kBF16 ? 8e-3 : 1e-3);
  EXPECT_GT(r.freed, 0);  // sliding blocks left the window and were reused
  // Which block ids a sequence gets changes nothing, to the bit.
  auto pool2 = MakePool(c, p.block_size, p.pool_dtype);
  const ScheduleResult r2 = RunSchedule(*model, *pool2, p.pool_dtype, 99);
  EXPECT_TRUE(r.paged == r2.paged);
  std::filesystem::remove_all(dir);
}

// Within one block (and a ring that has not wrapped) both paths hand the kernels the same
// runs of positions, so they agree to the bit, 16-bit caches included.
TEST(PagedForward, OneBlockIsBitwiseEqual) {
  const ModelConfig c = TestConfig("tiny");
  for (DType model_dtype : {DType::kF32, DType::kBF16}) {
    const std::string dir = WriteModel(c, "bitwise", model_dtype);
    ThreadPool threads(2);
    auto model = LoadModel(dir, &threads);
    ASSERT_TRUE(model);
    const DType kv = model_dtype == DType::kF32 ? DType::kF32 : DType::kF16;
    PagedKvOptions po;
    po.block_size = 32;
    po.dtype = kv;
    po.num_blocks[0] = po.num_blocks[1] = 3;
    auto pool = PagedKvPool::Create(c, po);
    ASSERT_TRUE(pool.ok()) << pool.message();
    std::vector<int32_t> tokens(28);
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 37 + 2) % kVocab);
    KvCache cache = model->NewKvCache(32);
    const std::vector<int32_t> table = {2};
    PagedSequence seq;
    seq.blocks[0] = seq.blocks[1] = table;
    std::vector<float> a(20 * kVocab), b(a.size());
    // A 20-token prefill, then token-by-token decode.
    for (int64_t pos = 0; pos < 28; pos += pos == 0 ? 20 : 1) {
      const int64_t n = pos == 0 ? 20 : 1;
      const std::span<const int32_t> toks(tokens.data() + pos, size_t(n));
      BatchItem bi{toks, &cache, LogitsMode::kAll};
      PagedBatchItem pi{toks, &seq, LogitsMode::kAll};
      ASSERT_TRUE(model->ForwardBatch({&bi, 1}, a.data()).ok());
      ASSERT_TRUE(model->ForwardPaged({&pi, 1}, **pool, b.data()).ok());
      seq.num_tokens += n;
      for (int64_t i = 0; i < n * kVocab; ++i) ASSERT_EQ(a[size_t(i)], b[size_t(i)]) << DTypeName(model_dtype) << " " << pos;
    }
    std::filesystem::remove_all(dir);
  }
}

// The contiguous cache has no fp8. Paged fp8 pools: block ids change nothing (to the bit),
// block sizes next to nothing (segment-end rounding in f32 can flip an fp8 rounding of a later
// layer: ~1e-3), and the logits stay near the f32 cache's (E4M3 keeps 3 mantissa bits, E5M2 2).
TEST(PagedForward, Fp8Pools) {
  const ModelConfig c = TestConfig("tiny");
  const std::string dir = WriteModel(c, "fp8", DType::kF32);
  ThreadPool threads(2);
  auto model = LoadModel(dir, &threads);
  ASSERT_TRUE(model);
  for (DType dt : {DType::kFp8E4m3, DType::kFp8E5m2}) {
    auto a = MakePool(c, 16, dt), b = MakePool(c, 5, dt), a2 = MakePool(c, 16, dt);
    ASSERT_TRUE(a && b && a2);
    const ScheduleResult ra = RunSchedule(*model, *a, DType::kF32);
    const ScheduleResult rb = RunSchedule(*model, *b, DType::kF32);
    const ScheduleResult ra2 = RunSchedule(*model, *a2, DType::kF32, 99);
    EXPECT_TRUE(ra.paged == ra2.paged) << DTypeName(dt);
    ASSERT_EQ(ra.paged.size(), rb.paged.size());
    double err = 0, ref = 0;
    for (size_t i = 0; i < ra.paged.size(); ++i) {
      err = std::max(err, double(std::fabs(ra.paged[i] - rb.paged[i])));
      ref = std::max(ref, double(std::fabs(ra.paged[i])));
    }
    EXPECT_LT(err / ref, 1e-2) << DTypeName(dt);
    EXPECT_GT(ra.rel_err, 1e-3) << DTypeName(dt);  // really rounded to fp8
    EXPECT_LT(ra.rel_err, dt == DType::kFp8E4m3 ? 0.25 : 0.6) << DTypeName(dt);
    std::printf("%s: block sizes 16/5 differ by %.2g, f32 cache by %.2g\n", std::string(DTypeName(dt)).c_str(),
                err / ref, ra.rel_err);
  }
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(
    Presets, PagedForward,
    ::testing::Values(PagedCase{"tiny", DType::kF32, 16, DType::kF32}, PagedCase{"tiny", DType::kF32, 5, DType::kF32},
                      PagedCase{"tiny", DType::kBF16, 16, DType::kF16}, PagedCase{"tiny", DType::kBF16, 5, DType::kF16},
                      PagedCase{"tiny", DType::kF32, 3, DType::kBF16}, PagedCase{"tiny", DType::kF32, 1, DType::kF16},
                      PagedCase{"tiny-e2b", DType::kF32, 16, DType::kF32}, PagedCase{"tiny-e2b", DType::kF32, 5, DType::kF32},
                      PagedCase{"tiny-e2b", DType::kBF16, 5, DType::kF16},
                      PagedCase{"tiny-moe", DType::kF32, 16, DType::kF32}, PagedCase{"tiny-moe", DType::kBF16, 5, DType::kF16},
                      PagedCase{"gemma3", DType::kF32, 16, DType::kF32}, PagedCase{"gemma3", DType::kBF16, 5, DType::kF16}),
    [](const auto& info) {
      std::string n = info.param.preset + "_" + std::string(DTypeName(info.param.model_dtype)) + "_bs" +
                       std::to_string(info.param.block_size) + "_" + std::string(DTypeName(info.param.pool_dtype));
      for (char& ch : n) if (ch == '-') ch = '_';
      return n;
    });

TEST(PagedKvPool, BlockBytesOf31b) {
  const ModelConfig c = *PresetConfig("31b");
  // 50 sliding layers × 16 KV heads × 256, 10 full K=V layers × 4 KV heads × 512; K and V.
  EXPECT_EQ(PagedKvPool::BlockBytes(c, KvGroup::kSliding, 16, DType::kBF16), uint64_t(50) * 16 * 256 * 2 * 2 * 16);
  EXPECT_EQ(PagedKvPool::BlockBytes(c, KvGroup::kFull, 16, DType::kBF16), uint64_t(10) * 4 * 512 * 2 * 2 * 16);
  EXPECT_EQ(PagedKvPool::BlockBytes(c, KvGroup::kFull, 1, DType::kBF16), uint64_t(10) * 8192);  // 8 KiB a layer
  EXPECT_EQ(PagedKvPool::BlockBytes(c, KvGroup::kFull, 16, DType::kF32),
            2 * PagedKvPool::BlockBytes(c, KvGroup::kFull, 16, DType::kBF16));
  EXPECT_EQ(2 * PagedKvPool::BlockBytes(c, KvGroup::kSliding, 16, DType::kFp8E4m3),
            PagedKvPool::BlockBytes(c, KvGroup::kSliding, 16, DType::kBF16));
}

TEST(PagedKvPool, BlockBytesSkipKvSharedLayers) {
  const ModelConfig c = *PresetConfig("e2b");
  // 15 of 35 layers own KV (20 shared): 3 full (layers 4, 9, 14) and 12 sliding, 1 KV head each.
  EXPECT_EQ(PagedKvPool::BlockBytes(c, KvGroup::kFull, 1, DType::kF16), uint64_t(3) * 512 * 2 * 2);
  EXPECT_EQ(PagedKvPool::BlockBytes(c, KvGroup::kSliding, 1, DType::kF16), uint64_t(12) * 256 * 2 * 2);
}

TEST(PagedKvPool, CreateChecksOptions) {
  const ModelConfig c = TestConfig("tiny");
  PagedKvOptions o;
  o.num_blocks[0] = 4;
  o.num_blocks[1] = 6;
  o.block_size = 5;
  auto pool = PagedKvPool::Create(c, o);
  ASSERT_TRUE(pool.ok()) << pool.message();
  EXPECT_EQ((*pool)->block_size(), 5);
  EXPECT_EQ((*pool)->dtype(), DType::kF16);
  EXPECT_EQ((*pool)->num_blocks(KvGroup::kFull), 4);
  EXPECT_EQ((*pool)->num_blocks(KvGroup::kSliding), 6);
  EXPECT_TRUE((*pool)->HasGroup(KvGroup::kFull) && (*pool)->HasGroup(KvGroup::kSliding));
  EXPECT_GE((*pool)->bytes(), 4 * PagedKvPool::BlockBytes(c, KvGroup::kFull, 5, DType::kF16) +
                                  6 * PagedKvPool::BlockBytes(c, KvGroup::kSliding, 5, DType::kF16));

  PagedKvOptions bad = o;
  bad.block_size = 0;
  auto r = PagedKvPool::Create(c, bad);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("block size"), std::string::npos) << r.message();
  bad = o;
  bad.dtype = DType::kI8;
  r = PagedKvPool::Create(c, bad);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("not supported"), std::string::npos) << r.message();
  bad = o;
  bad.num_blocks[int(KvGroup::kSliding)] = 0;
  r = PagedKvPool::Create(c, bad);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("sliding-window"), std::string::npos) << r.message();
}

TEST(PagedKvPool, ModelWithoutSlidingLayersNeedsNoSlidingBlocks) {
  ModelConfig c = TestConfig("tiny");
  c.layer_types.assign(size_t(c.num_layers), LayerType::kFull);
  EXPECT_EQ(PagedKvPool::BlockBytes(c, KvGroup::kSliding, 16, DType::kF16), 0u);
  PagedKvOptions o;
  o.num_blocks[int(KvGroup::kFull)] = 3;
  auto pool = PagedKvPool::Create(c, o);
  ASSERT_TRUE(pool.ok()) << pool.message();
  EXPECT_FALSE((*pool)->HasGroup(KvGroup::kSliding));
  EXPECT_EQ((*pool)->num_blocks(KvGroup::kSliding), 0);
  EXPECT_EQ((*pool)->bytes(), 3 * PagedKvPool::BlockBytes(c, KvGroup::kFull, 16, DType::kF16));
}

TEST(PagedForward, RejectsBadInputWithoutHarm) {
  const ModelConfig c = TestConfig("tiny");
  const std::string dir = WriteModel(c, "errors", DType::kBF16);
  ThreadPool threads(1);
  ModelLoadOptions lo;
  lo.max_chunk = 8;
  auto model = GemmaModel::Load(dir, &threads, lo);
  ASSERT_TRUE(model.ok()) << model.message();
  GemmaModel& m = **model;
  PagedKvOptions po;
  po.block_size = 4;
  po.num_blocks[0] = po.num_blocks[1] = 4;
  auto pool_or = PagedKvPool::Create(c, po);
  ASSERT_TRUE(pool_or.ok()) << pool_or.message();
  PagedKvPool& pool = **pool_or;
  std::vector<float> logits(kVocab);
  const std::vector<int32_t> tokens = {2, 17, 40, 99, 5, 250};
  const std::vector<int32_t> full = {3, 1}, sliding = {0, 2};
  PagedSequence seq;
  seq.blocks[0] = full;
  seq.blocks[1] = sliding;
  auto expect_error = [&](const std::vector<PagedBatchItem>& items, const std::string& words) {
    const Status s = m.ForwardPaged(items, pool, logits.data());
    ASSERT_FALSE(s.ok()) << words;
    EXPECT_NE(s.message().find(words), std::string::npos) << s.message();
  };

  const std::vector<int32_t> bad_token = {2, kVocab};
  expect_error({{bad_token, &seq}}, "outside");
  expect_error({{tokens, nullptr}}, "PagedSequence");
  const std::vector<int32_t> nine(9, 5);
  expect_error({{nine, &seq}}, "exceeds");
  PagedSequence later = seq;
  later.num_tokens = 4;  // positions 4..9 need block 2
  expect_error({{tokens, &later}}, "needs block 2");
  const std::vector<int32_t> out_of_pool = {3, 4};
  PagedSequence outside = seq;
  outside.blocks[0] = out_of_pool;
  expect_error({{tokens, &outside}}, "not a block of the pool");
  const std::vector<int32_t> freed = {-1, 2};
  PagedSequence freed_visible = seq;
  freed_visible.blocks[1] = freed;
  freed_visible.num_tokens = 2;  // positions 2..7: the first sees position 0 (window 7)
  expect_error({{tokens, &freed_visible}}, "freed but still visible");
  PagedSequence freed_full = seq;
  freed_full.blocks[0] = freed;
  freed_full.num_tokens = 6;
  expect_error({{{tokens.data(), 1}, &freed_full}}, "freed");
  auto other = PagedKvPool::Create(TestConfig("tiny-e2b"), po);
  ASSERT_TRUE(other.ok());
  const Status s = m.ForwardPaged(std::vector<PagedBatchItem>{{tokens, &seq}}, **other, logits.data());
  EXPECT_NE(s.message().find("another shape"), std::string::npos) << s.message();

  // Nothing was written or changed by the failures: the valid pass gives exactly the logits of
  // the same pass over a fresh pool (same code path, one thread: bit for bit), and agrees with
  // the contiguous cache within the rounding of a different summation order.
  ASSERT_TRUE(m.ForwardPaged(std::vector<PagedBatchItem>{{tokens, &seq}}, pool, logits.data()).ok());
  EXPECT_EQ(seq.num_tokens, 0);  // the engine advances it, not the model
  auto fresh = PagedKvPool::Create(c, po);
  ASSERT_TRUE(fresh.ok());
  PagedSequence fresh_seq = seq;
  std::vector<float> expected(kVocab);
  ASSERT_TRUE(m.ForwardPaged(std::vector<PagedBatchItem>{{tokens, &fresh_seq}}, **fresh, expected.data()).ok());
  for (int v = 0; v < kVocab; ++v) ASSERT_EQ(logits[size_t(v)], expected[size_t(v)]) << "logit " << v;
  KvCache cache = m.NewKvCache(8);
  ASSERT_TRUE(m.Forward(tokens, cache, LogitsMode::kLast, expected.data()).ok());
  for (int v = 0; v < kVocab; ++v) EXPECT_NEAR(logits[size_t(v)], expected[size_t(v)], 1e-3);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gk
