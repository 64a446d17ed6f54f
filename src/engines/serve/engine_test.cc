// The serving engine against the single-sequence generator (SingleSequence, itself checked
// against the contiguous KV cache of the PyTorch oracle tests): the same greedy request gives the same tokens alone and among
// many concurrent others, with prefix caching on and off, chunked prefill on and off, small
// blocks, and a KV pool small enough to force preemption. Afterwards no block is in use.
#include "engines/serve/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <random>

#include "engines/generate/generator.h"
#include "kernels/ops.h"
#include "kernels/token_pick.h"
#include "model/presets.h"
#include "model/random_init.h"
#include "model/toy_models_test_util.h"

namespace gk {
namespace {

std::string TinyModel(const std::string& preset, DType dtype) {
  ModelConfig c = ToyConfig(preset, 12);
  c.max_position_embeddings = 512;
  return WriteToyModel(c, "gk_engine_test_" + preset + (dtype == DType::kF32 ? "_f32" : "_bf16"), dtype, 11);
}

std::vector<std::vector<int32_t>> Prompts(int n, uint32_t seed, const std::vector<int32_t>& shared_prefix = {}) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p = shared_prefix;
    const int len = 1 + int(rng() % 40);
    for (int j = 0; j < len; ++j) p.push_back(int32_t(3 + rng() % 290));
    out.push_back(p);
  }
  return out;
}

std::vector<int32_t> Reference(const std::string& dir, const std::vector<int32_t>& prompt, int max_tokens) {
  ThreadPool pool(2);
  auto model = GemmaModel::Load(dir, &pool, {});
  EXPECT_TRUE(model.ok()) << model.message();
  GenerateOptions o;
  o.max_tokens = max_tokens;
  std::vector<int32_t> out;
  auto r = Generate(**model, prompt, o, [&](int32_t t) {
    out.push_back(t);
    return true;
  });
  EXPECT_TRUE(r.ok()) << r.message();
  return out;
}

// Submits every prompt at once and waits for all of them.
struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  std::map<int, std::vector<int32_t>> tokens;
  std::map<int, FinishReason> finish;
  std::map<int, RequestOutput> last;

  OutputCallback For(int i) {
    return [this, i](const RequestOutput& o) {
      std::lock_guard<std::mutex> lock(mu);
      auto& t = tokens[i];
      t.insert(t.end(), o.tokens.begin(), o.tokens.end());
      if (o.finish != FinishReason::kNone) {
        finish[i] = o.finish;
        last[i] = o;
        cv.notify_all();
      }
    };
  }
  void Wait(size_t n) {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(120), [&] { return finish.size() == n; }));
  }
};

std::unique_ptr<ServeEngine> StartEngine(const std::string& dir, ThreadPool* pool, const EngineOptions& o, int max_chunk = 64) {
  ModelLoadOptions lo;
  lo.max_chunk = max_chunk;
  auto model = GemmaModel::Load(dir, pool, lo);
  EXPECT_TRUE(model.ok()) << model.message();
  auto engine = ServeEngine::Create(std::move(*model), o);
  EXPECT_TRUE(engine.ok()) << engine.message();
  return std::move(*engine);
}

struct Variant {
  const char* name;
  bool prefix;
  bool chunked;
  int64_t budget;
  int block_size;
  uint64_t kv_bytes;  // 0: default
};

class EngineMatchesGenerator : public ::testing::TestWithParam<Variant> {};

TEST_P(EngineMatchesGenerator, ConcurrentGreedyRequestsGiveTheirSoloTokens) {
  const Variant v = GetParam();
  const std::string dir = TinyModel("tiny", DType::kF32);
  const int kMaxTokens = 10;
  std::vector<int32_t> prefix;
  for (int i = 0; i < 20; ++i) prefix.push_back(int32_t(10 + i));
  auto prompts = Prompts(8, 5, {});
  auto shared = Prompts(9, 6, prefix);  // share 20 tokens: prefix-cache hits when enabled
  prompts.insert(prompts.end(), shared.begin(), shared.end());

  std::vector<std::vector<int32_t>> expected;
  for (const auto& p : prompts) expected.push_back(Reference(dir, p, kMaxTokens));

  ThreadPool pool(2);
  EngineOptions o;
  o.max_model_len = 128;
  o.enable_prefix_caching = v.prefix;
  o.enable_chunked_prefill = v.chunked;
  o.max_num_batched_tokens = v.budget;
  o.block_size = v.block_size;
  o.kv_cache_bytes = v.kv_bytes;
  auto engine = StartEngine(dir, &pool, o);
  ASSERT_TRUE(engine);
  Collector c;
  for (size_t i = 0; i < prompts.size(); ++i) {
    EngineRequest r;
    r.prompt = prompts[i];
    r.max_tokens = kMaxTokens;
    ASSERT_TRUE(engine->Submit(r, c.For(int(i))).ok());
  }
  c.Wait(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(c.tokens[int(i)], expected[i]) << "request " << i;
    EXPECT_EQ(c.finish[int(i)], FinishReason::kLength);
    EXPECT_EQ(c.last[int(i)].completion_tokens, kMaxTokens);
    EXPECT_EQ(c.last[int(i)].prompt_tokens, int64_t(prompts[i].size()));
  }
  const EngineStats s = engine->Stats();
  EXPECT_EQ(s.blocks_used[0] + s.blocks_used[1], 0) << "KV blocks leaked";
  EXPECT_EQ(s.generation_tokens, uint64_t(kMaxTokens * prompts.size()));
  if (v.prefix) {
    EXPECT_GT(s.prefix_cache_hits, 0u);
  } else {
    EXPECT_EQ(s.prefix_cache_hits, 0u);
  }
  if (v.kv_bytes) {
    EXPECT_GT(s.preemptions, 0u) << "the small pool was meant to force preemption";
  }
  engine->Shutdown(true);
}

// The tiny model's KV: full group 1 layer × 1 head × 64 dims, sliding 5 layers × 2 × 32 (f32).
INSTANTIATE_TEST_SUITE_P(
    Variants, EngineMatchesGenerator,
    ::testing::Values(Variant{"prefix_chunked", true, true, 32, 16, 0}, Variant{"noprefix_chunked", false, true, 32, 4, 0},
                      Variant{"prefix_whole", true, false, 128, 4, 0}, Variant{"noprefix_whole", false, false, 128, 16, 0},
                      Variant{"preempting", true, true, 16, 4, 200000}),
    [](const ::testing::TestParamInfo<Variant>& i) { return std::string(i.param.name); });

TEST(ServeEngine, LongDecodeSlidesTheWindowAndMatches) {
  const std::string dir = TinyModel("tiny-e2b", DType::kBF16);  // PLE + KV sharing, f16 KV
  std::vector<int32_t> prompt = Prompts(1, 9)[0];
  const auto expected = Reference(dir, prompt, 60);  // runs far past the 12-token window
  ThreadPool pool(2);
  EngineOptions o;
  o.max_model_len = 128;
  o.block_size = 4;
  auto engine = StartEngine(dir, &pool, o);
  Collector c;
  EngineRequest r;
  r.prompt = prompt;
  r.max_tokens = 60;
  ASSERT_TRUE(engine->Submit(r, c.For(0)).ok());
  c.Wait(1);
  EXPECT_EQ(c.tokens[0], expected);
}

TEST(ServeEngine, StopTokensAbortAndErrors) {
  const std::string dir = TinyModel("tiny", DType::kF32);
  const auto prompt = Prompts(1, 3)[0];
  const auto expected = Reference(dir, prompt, 8);
  ThreadPool pool(2);
  EngineOptions o;
  o.max_model_len = 64;
  o.max_waiting = 2;
  auto engine = StartEngine(dir, &pool, o);

  Collector c;
  EngineRequest r;
  r.prompt = prompt;
  r.max_tokens = 8;
  r.stop_token_ids = {expected[3]};  // ends at the 4th token, which is not emitted
  ASSERT_TRUE(engine->Submit(r, c.For(0)).ok());
  c.Wait(1);
  EXPECT_EQ(c.finish[0], FinishReason::kStop);
  EXPECT_EQ(c.last[0].stop_token, expected[3]);
  const size_t first_stop =
      size_t(std::find(expected.begin(), expected.end(), expected[3]) - expected.begin());
  EXPECT_EQ(c.tokens[0], std::vector<int32_t>(expected.begin(), expected.begin() + long(first_stop)));

  EXPECT_FALSE(engine->Submit(EngineRequest{}, c.For(9)).ok());  // empty prompt
  EngineRequest too_long;
  too_long.prompt.assign(60, 5);
  too_long.max_tokens = 5;
  auto e = engine->Submit(too_long, c.For(9));
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message().find("maximum context length is 64 tokens"), std::string::npos) << e.message();
  EngineRequest bad_id;
  bad_id.prompt = {1, 300};
  EXPECT_FALSE(engine->Submit(bad_id, c.For(9)).ok());

  // Abort: a long request ends with kAbort and frees its blocks.
  Collector a;
  EngineRequest longer;
  longer.prompt = prompt;
  longer.max_tokens = 64 - int(prompt.size());
  auto id = engine->Submit(longer, a.For(0));
  ASSERT_TRUE(id.ok());
  engine->Abort(*id);
  a.Wait(1);
  EXPECT_EQ(a.finish[0], FinishReason::kAbort);
  EXPECT_LT(a.tokens[0].size(), size_t(longer.max_tokens));
  engine->Shutdown(true);
  EXPECT_FALSE(engine->alive());
  const EngineStats s = engine->Stats();
  EXPECT_EQ(s.blocks_used[0] + s.blocks_used[1], 0);
  EXPECT_FALSE(engine->Submit(longer, a.For(1)).ok());  // shut down
}

TEST(ServeEngine, QueueLimitRefusesInsteadOfGrowing) {
  const std::string dir = TinyModel("tiny", DType::kF32);
  ThreadPool pool(2);
  EngineOptions o;
  o.max_model_len = 64;
  o.max_waiting = 3;
  o.max_num_seqs = 1;
  auto engine = StartEngine(dir, &pool, o);
  Collector c;
  int accepted = 0, refused = 0;
  for (int i = 0; i < 40; ++i) {
    EngineRequest r;
    r.prompt = {5, 6, 7};
    r.max_tokens = 30;
    auto id = engine->Submit(r, c.For(i));
    if (id.ok()) {
      ++accepted;
    } else {
      EXPECT_EQ(id.message().rfind("queue full", 0), 0u) << id.message();
      ++refused;
    }
  }
  EXPECT_GT(refused, 0);
  c.Wait(size_t(accepted));
  engine->Shutdown(true);
}

// The n choices of one API request go in as a group: all or nothing against the queue limit,
// and a bad member queues none; a group that fits runs every member to the end.
TEST(ServeEngine, SubmitGroupIsAllOrNothing) {
  const std::string dir = TinyModel("tiny", DType::kF32);
  ThreadPool pool(2);
  EngineOptions o;
  o.max_model_len = 64;
  o.max_waiting = 3;
  auto engine = StartEngine(dir, &pool, o);
  Collector c;
  auto group = [&](int n, int first, bool bad_last) {
    std::vector<EngineRequest> rs;
    std::vector<OutputCallback> cbs;
    for (int i = 0; i < n; ++i) {
      EngineRequest r;
      r.prompt = {5, 6, 7};
      if (bad_last && i == n - 1) r.prompt = {};
      r.max_tokens = 4;
      rs.push_back(r);
      cbs.push_back(c.For(first + i));
    }
    return engine->SubmitGroup(std::move(rs), std::move(cbs));
  };
  auto too_many = group(4, 0, false);
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.message().rfind("queue full", 0), 0u) << too_many.message();
  auto bad = group(2, 10, true);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("empty"), std::string::npos) << bad.message();
  EXPECT_EQ(engine->Stats().waiting, 0);  // nothing of either was queued
  auto ok = group(3, 20, false);
  ASSERT_TRUE(ok.ok()) << ok.message();
  EXPECT_EQ(ok->size(), 3u);
  c.Wait(3);
  for (int i = 20; i < 23; ++i) EXPECT_EQ(c.tokens[i].size(), 4u) << i;
  engine->Shutdown(true);
}

}  // namespace
}  // namespace gk

namespace gk {
namespace {

// bf16 KV (not what the generator uses): each request alone through the engine, then all 17
// together; the tokens must not depend on the company a request keeps.
TEST(ServeEngine, Bf16KvBatchedEqualsAlone) {
  const std::string dir = TinyModel("tiny", DType::kBF16);
  const auto prompts = Prompts(17, 21);
  ThreadPool pool(2);
  EngineOptions o;
  o.max_model_len = 128;
  o.kv_dtype = DType::kBF16;
  o.block_size = 8;
  auto engine = StartEngine(dir, &pool, o);
  std::vector<std::vector<int32_t>> alone;
  for (size_t i = 0; i < prompts.size(); ++i) {
    Collector c;
    EngineRequest r;
    r.prompt = prompts[i];
    r.max_tokens = 8;
    ASSERT_TRUE(engine->Submit(r, c.For(0)).ok());
    c.Wait(1);
    alone.push_back(c.tokens[0]);
  }
  Collector c;
  for (size_t i = 0; i < prompts.size(); ++i) {
    EngineRequest r;
    r.prompt = prompts[i];
    r.max_tokens = 8;
    ASSERT_TRUE(engine->Submit(r, c.For(int(i))).ok());
  }
  c.Wait(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(c.tokens[int(i)], alone[i]) << "request " << i;
  EXPECT_EQ(engine->capacity().kv_dtype, DType::kBF16);
}

// The CPU runner dressed as a GPU runner: it picks every row's token itself, as its item's
// pick says (the CPU reference of the GPU's race, kernels/token_pick.h), and overwrites the rows
// of token_only items with NaN (as if never copied to the host). The engine must emit the
// runner's tokens, draw the keys from each request's seeded generator, and still read logprobs
// from the rows that came over.
class PickingRunner final : public ModelRunner {
 public:
  explicit PickingRunner(std::unique_ptr<GemmaModel> inner) : inner_(std::move(inner)) {}
  const ModelConfig& config() const override { return inner_->config(); }
  int max_chunk() const override { return inner_->max_chunk(); }
  std::string device() const override { return "cpu-picking"; }
  DType default_kv_dtype() const override { return inner_->default_kv_dtype(); }
  Result<std::unique_ptr<PagedKvPool>> NewPagedKvPool(const PagedKvOptions& o) override { return inner_->NewPagedKvPool(o); }
  Status ForwardPaged(std::span<const PagedBatchItem> items, PagedKvPool& pool, float* logits) override {
    GK_RETURN_IF_ERROR(inner_->ForwardPaged(items, pool, logits));
    const int64_t V = config().vocab_size;
    picked_.clear();
    for (const PagedBatchItem& it : items) {
      const int64_t rows = it.logits == LogitsMode::kAll ? int64_t(it.tokens.size())
                           : it.logits == LogitsMode::kLast && !it.tokens.empty() ? 1 : 0;
      for (int64_t r = 0; r < rows; ++r) {
        float* row = logits + int64_t(picked_.size()) * V;
        picked_.push_back(PickTokenReference(row, V, it.pick));
        if (it.token_only) std::fill(row, row + V, std::numeric_limits<float>::quiet_NaN());
      }
    }
    return Status::Ok();
  }
  bool picks_tokens() const override { return true; }
  const int32_t* picked_tokens() const override { return picked_.data(); }

 private:
  std::unique_ptr<GemmaModel> inner_;
  std::vector<int32_t> picked_;
};

TEST(ServeEngine, EmitsTheTokensTheRunnerPicks) {
  const std::string dir = TinyModel("tiny", DType::kF32);
  const auto prompts = Prompts(12, 31);
  ThreadPool pool(2);
  EngineOptions o;
  o.max_model_len = 128;
  ModelLoadOptions lo;
  lo.max_chunk = 64;
  // Request i: greedy (i % 4 == 0), greedy with logprobs (1), sampled with a seed (2), and
  // sampled with the same seed and prompt as request i - 1, with logprobs (3).
  auto sampling = [&](size_t i) { return i % 4 >= 2 ? SamplingParams{0.8f, 20, 0.9f, 1000 + i / 4} : SamplingParams{}; };
  auto prompt = [&](size_t i) { return prompts[i % 4 == 3 ? i - 1 : i]; };
  auto run = [&](std::unique_ptr<ModelRunner> runner) {
    auto engine = ServeEngine::Create(std::move(runner), o);
    EXPECT_TRUE(engine.ok()) << engine.message();
    Collector c;
    for (size_t i = 0; i < prompts.size(); ++i) {
      EngineRequest r;
      r.prompt = prompt(i);
      r.max_tokens = 8;
      r.sampling = sampling(i);
      if (i % 2 == 1) r.logprobs = 2;
      EXPECT_TRUE((*engine)->Submit(r, c.For(int(i))).ok());
    }
    c.Wait(prompts.size());
    return std::make_pair(c.tokens, c.last);
  };
  auto load = [&] {
    auto m = GemmaModel::Load(dir, &pool, lo);
    EXPECT_TRUE(m.ok()) << m.message();
    return std::move(*m);
  };
  const auto plain = run(load());
  const auto got = run(std::make_unique<PickingRunner>(load()));
  PickingRunner alone(load());
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(got.second.at(int(i)).completion_tokens, 8) << "request " << i;
    if (i % 4 < 2) {  // greedy: the runner's argmax is the engine's
      EXPECT_EQ(got.first.at(int(i)), plain.first.at(int(i))) << "request " << i;
      continue;
    }
    // Sampled: the tokens Generate draws through the same runner from the same seed, with or
    // without logprobs (the logprobs row still comes over: finite values for the picked token).
    GenerateOptions g;
    g.max_tokens = 8;
    g.sampling = sampling(i);
    std::vector<int32_t> want;
    ASSERT_TRUE(Generate(alone, prompt(i), g, [&](int32_t t) { want.push_back(t); return true; }).ok());
    EXPECT_EQ(got.first.at(int(i)), want) << "request " << i;
  }
  const auto& lp = got.second.at(3).logprobs;
  ASSERT_FALSE(lp.empty());
  EXPECT_TRUE(std::isfinite(lp.back().logprob) && lp.back().logprob <= 0.f);
  EXPECT_EQ(lp.back().token, got.first.at(3).back());
}

}  // namespace
}  // namespace gk
