// The merge against the un-merged LoRA forward pass: a model merged by MergeLora gives the
// logits TrainingModel computes with the adapter applied on the fly (f32 base: to float
// rounding; bf16 base: within the bf16 rounding of the merged weights, far below the LoRA's
// own effect: at most 3× what rounding the f32 base to bf16 does to the logits). Also: sharded checkpoints stay sharded, other files are copied, and mismatched
// adapters are refused before anything is written.
#include "tools/bridge/merge.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "formats/safetensors.h"
#include "model/gemma_model.h"
#include "model/toy_models_test_util.h"
#include "model/train/lora.h"
#include "model/train/lora_test_util.h"
#include "model/train/training_model.h"

namespace gk::bridge {
namespace {

namespace fs = std::filesystem;

LoraAdapter RandomAdapter(const ModelConfig& c, const std::string& prefix, float b_std) {
  LoraOptions o;
  o.rank = 4;
  o.alpha = 8;
  return RandomLoraAdapter(c, prefix, o, 1, b_std);
}

std::vector<float> EngineLogits(const std::string& dir, const std::vector<int32_t>& tokens) {
  ThreadPool pool(2);
  auto m = GemmaModel::Load(dir, &pool);
  EXPECT_TRUE(m.ok()) << m.message();
  KvCache cache = (*m)->NewKvCache(int64_t(tokens.size()));
  std::vector<float> logits(tokens.size() * size_t((*m)->config().vocab_size));
  EXPECT_TRUE((*m)->Forward(tokens, cache, LogitsMode::kAll, logits.data()).ok());
  return logits;
}

void CheckMerge(DType dtype, uint64_t max_shard_bytes) {
  const ModelConfig c = ToyConfig("tiny", 8);
  const std::string tag = StrCat(dtype == DType::kF32 ? "f32" : "bf16", "_", max_shard_bytes);
  const std::string base = TestTempDir("gk_merge_base_" + tag);
  RandomModelOptions ro;
  ro.seed = 3;
  ro.dtype = dtype;
  ro.max_shard_bytes = max_shard_bytes;
  ASSERT_TRUE(WriteRandomModel(c, base, ro).ok());
  auto w = LoadWeights(base, c);
  ASSERT_TRUE(w.ok());
  LoraAdapter adapter = RandomAdapter(c, w->prefix, 0.3f);
  const std::string work = TestTempDir("gk_merge_work_" + tag);
  ASSERT_TRUE(adapter.SavePeft(work + "/adapter", base).ok());
  auto src = OpenPeftLoraSource(work + "/adapter");
  ASSERT_TRUE(src.ok()) << src.message();
  const std::string out = work + "/merged";
  fs::remove_all(out);
  auto rep = MergeLora(base, **src, out);
  ASSERT_TRUE(rep.ok()) << rep.message();
  EXPECT_EQ(rep->merged_tensors, int64_t(adapter.modules().size()));
  EXPECT_TRUE(fs::exists(out + "/config.json"));
  if (max_shard_bytes < (1u << 20)) {
    EXPECT_GT(rep->files, 1);
    EXPECT_TRUE(fs::exists(out + "/model.safetensors.index.json"));
  }
  EXPECT_FALSE(MergeLora(base, **src, out).ok()) << "an existing output must not be overwritten";

  std::mt19937_64 rng(5);
  std::vector<int32_t> tokens(20);
  for (auto& t : tokens) t = int32_t(rng() % uint64_t(c.vocab_size));
  const std::vector<float> merged = EngineLogits(out, tokens), plain = EngineLogits(base, tokens);
  // The scale of bf16 rounding for this model: the same weights in f32 and rounded to bf16.
  double rounding = 0;
  if (dtype == DType::kBF16) {
    const std::string f32 = TestTempDir("gk_merge_base_f32_twin");
    RandomModelOptions fo = ro;
    fo.dtype = DType::kF32;
    ASSERT_TRUE(WriteRandomModel(c, f32, fo).ok());
    const std::vector<float> exact = EngineLogits(f32, tokens);
    for (size_t i = 0; i < exact.size(); ++i) rounding = std::max(rounding, double(std::abs(exact[i] - plain[i])));
  }
  ThreadPool pool(2);
  TrainingModelOptions to;
  to.max_tokens = 64;
  auto tm = TrainingModel::Create(c, std::move(*w), &adapter, &pool, to);
  ASSERT_TRUE(tm.ok());
  std::vector<float> unmerged(merged.size());
  ASSERT_TRUE((*tm)->Logits(tokens, unmerged.data()).ok());
  double err = 0, effect = 0;
  for (size_t i = 0; i < merged.size(); ++i) {
    err = std::max(err, double(std::abs(merged[i] - unmerged[i])));
    effect = std::max(effect, double(std::abs(plain[i] - unmerged[i])));
  }
  std::printf("%s: max |merged - unmerged| %.3g, LoRA effect %.3g, bf16 rounding of the base %.3g\n", tag.c_str(),
              err, effect, rounding);
  ASSERT_GT(effect, 0.1) << "the adapter must change the logits for the test to mean anything";
  if (dtype == DType::kF32) EXPECT_LT(err, 2e-3);
  else EXPECT_LT(err, 3 * rounding);  // one bf16 rounding of the merged weights, as of the base's
}

TEST(Merge, F32MergedLogitsEqualTheUnmergedLoraForward) { CheckMerge(DType::kF32, 5ull << 30); }
TEST(Merge, Bf16ShardedMergedLogitsMatchWithinBf16Rounding) { CheckMerge(DType::kBF16, 200 << 10); }

TEST(Merge, RefusesAnAdapterForAnotherModel) {
  const ModelConfig c = ToyConfig("tiny", 8);
  const std::string base = WriteToyModel(c, "gk_merge_refuse_base", DType::kBF16, 4);
  ModelConfig other = c;
  other.num_layers = 8;
  other.layer_types.assign(8, LayerType::kSliding);
  other.layer_types[5] = LayerType::kFull;
  LoraAdapter adapter = RandomAdapter(other, "model.", 0.1f);
  const std::string work = TestTempDir("gk_merge_refuse_work");
  ASSERT_TRUE(adapter.SavePeft(work + "/adapter", base).ok());
  auto src = OpenPeftLoraSource(work + "/adapter");
  ASSERT_TRUE(src.ok());
  fs::remove_all(work + "/merged");
  auto rep = MergeLora(base, **src, work + "/merged");
  ASSERT_FALSE(rep.ok());
  EXPECT_NE(rep.message().find("layers.6"), std::string::npos) << rep.message();
  EXPECT_FALSE(fs::exists(work + "/merged"));
}

}  // namespace
}  // namespace gk::bridge
