// Self-consistency of the decoder (the independent PyTorch oracle lives in tests/oracle):
// one prefill, token-by-token decode and chunked prefill give the same logits, on every
// architecture variant, including sequences longer than the sliding window.
#include "model/gemma_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include <nlohmann/json.hpp>

#include "formats/safetensors.h"
#include "model/presets.h"
#include "model/random_init.h"
#include "model/toy_models_test_util.h"
#include "util/atomic_file.h"

namespace gk {
namespace {

ModelConfig SmallVocab(const std::string& preset) { return ToyConfig(preset, 5); }

std::string WriteModel(const ModelConfig& c, const std::string& name, DType dtype) {
  return WriteToyModel(c, "gk_model_test_" + name, dtype, 7);
}

std::vector<float> RunChunked(const std::string& dir, const std::vector<int32_t>& tokens, int chunk) {
  ThreadPool pool(2);
  ModelLoadOptions lo;
  lo.max_chunk = chunk;
  auto model = GemmaModel::Load(dir, &pool, lo);
  EXPECT_TRUE(model.ok()) << model.message();
  const int64_t V = (*model)->config().vocab_size;
  KvCache cache = (*model)->NewKvCache(int64_t(tokens.size()));
  std::vector<float> logits(tokens.size() * size_t(V));
  Status s = (*model)->Forward(tokens, cache, LogitsMode::kAll, logits.data());
  EXPECT_TRUE(s.ok()) << s.message();
  return logits;
}

class DecoderConsistency : public ::testing::TestWithParam<std::string> {};

TEST_P(DecoderConsistency, PrefillDecodeAndChunksAgree) {
  const ModelConfig c = SmallVocab(GetParam());
  const std::string dir = WriteModel(c, GetParam(), DType::kF32);
  std::mt19937 rng(3);
  std::vector<int32_t> tokens(19);
  for (auto& t : tokens) t = int32_t(rng() % 300);
  tokens[0] = 2;
  const auto whole = RunChunked(dir, tokens, 64);
  for (int chunk : {1, 4}) {
    const auto part = RunChunked(dir, tokens, chunk);
    ASSERT_EQ(part.size(), whole.size());
    double max_err = 0, max_ref = 0;
    for (size_t i = 0; i < whole.size(); ++i) {
      max_err = std::max(max_err, double(std::fabs(part[i] - whole[i])));
      max_ref = std::max(max_ref, double(std::fabs(whole[i])));
    }
    EXPECT_LT(max_err / max_ref, 1e-5) << GetParam() << " chunk " << chunk;
  }
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Presets, DecoderConsistency,
                         ::testing::Values("tiny", "tiny-e2b", "tiny-moe", "gemma3-270m"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n) if (ch == '-') ch = '_';
                           return n;
                         });

TEST(GemmaModel, RejectsTokenOutsideEmbeddingAndOverlongInput) {
  ModelConfig c = SmallVocab("tiny");
  const std::string dir = WriteModel(c, "bad_input", DType::kBF16);
  ThreadPool pool(1);
  auto model = GemmaModel::Load(dir, &pool);
  ASSERT_TRUE(model.ok()) << model.message();
  KvCache cache = (*model)->NewKvCache(4);
  std::vector<float> logits(300);
  const std::vector<int32_t> bad = {2, 300};
  Status s = (*model)->Forward(bad, cache, LogitsMode::kLast, logits.data());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("outside"), std::string::npos) << s.message();
  const std::vector<int32_t> longer = {2, 5, 6, 7, 8};
  s = (*model)->Forward(longer, cache, LogitsMode::kLast, logits.data());
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("exceeds the context"), std::string::npos) << s.message();
  std::filesystem::remove_all(dir);
}

TEST(GemmaModel, MissingAndMisshapedTensorsAreNamed) {
  ModelConfig c = SmallVocab("tiny");
  const std::string dir = WriteModel(c, "shape_check", DType::kBF16);
  ThreadPool pool(1);
  ModelConfig wider = c;
  wider.intermediate_size = 1024;
  auto w = LoadWeights(dir, wider);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.message().find("mlp.gate_proj.weight has shape [512, 128]"), std::string::npos) << w.message();
  ModelConfig more_layers = c;
  more_layers.num_layers = 7;
  more_layers.layer_types.push_back(LayerType::kFull);
  w = LoadWeights(dir, more_layers);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.message().find("missing: model.layers.6."), std::string::npos) << w.message();
  ModelConfig fewer = c;
  fewer.num_layers = 5;
  fewer.layer_types.resize(5);
  w = LoadWeights(dir, fewer);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.message().find("unexpected tensor(s)"), std::string::npos) << w.message();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gk

namespace gk {
namespace {

// An F16 checkpoint (rewritten from an F32 one with our writer) loads, is widened to f32, and
// gives the F32 model's logits within f16 rounding.
TEST(GemmaModel, LoadsF16Checkpoints) {
  ModelConfig c = SmallVocab("tiny");
  const std::string dir = WriteModel(c, "f16_src", DType::kF32);
  const std::string dir16 = dir + "_f16";
  std::filesystem::remove_all(dir16);
  std::filesystem::create_directories(dir16);
  std::filesystem::copy(dir + "/config.json", dir16 + "/config.json");
  auto set = SafetensorsSet::Open(dir);
  ASSERT_TRUE(set.ok()) << set.message();
  std::vector<TensorSpec> specs;
  for (const std::string& name : set->Names()) {
    const TensorInfo* t = set->Find(name);
    TensorSpec s{name, DType::kF16, t->shape, nullptr};
    s.fill = [&set, t](uint8_t* dst, size_t nbytes) {
      std::vector<float> f(size_t(t->numel()));
      GK_RETURN_IF_ERROR(set->ReadInto(*t, f.data()));
      for (size_t i = 0; i < f.size(); ++i) {
        const uint16_t h = F32ToF16(f[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return Status::Ok();
    };
    specs.push_back(std::move(s));
  }
  ASSERT_TRUE(WriteSafetensorsDir(dir16, specs, 1ull << 40).ok());
  const std::vector<int32_t> tokens = {2, 17, 40, 99, 5, 250, 8, 31, 77};
  const auto a = RunChunked(dir, tokens, 64), b = RunChunked(dir16, tokens, 64);
  double max_err = 0, max_ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    max_err = std::max(max_err, double(std::fabs(a[i] - b[i])));
    max_ref = std::max(max_ref, double(std::fabs(a[i])));
  }
  EXPECT_LT(max_err / max_ref, 1e-2);
  EXPECT_GT(max_err, 0.0);  // really f16 values, not the f32 file again
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(dir16);
}

}  // namespace
}  // namespace gk

namespace gk {
namespace {

// Sequences run together (a prefill beside decodes, different positions) give each the
// logits it gets alone.
TEST(GemmaModel, BatchedSequencesMatchSingleRuns) {
  for (const char* preset : {"tiny", "tiny-e2b"}) {
    ModelConfig c = SmallVocab(preset);
    const std::string dir = WriteModel(c, std::string("batch_") + preset, DType::kF32);
    ThreadPool pool(2);
    ModelLoadOptions lo;
    lo.max_chunk = 32;
    auto model = GemmaModel::Load(dir, &pool, lo);
    ASSERT_TRUE(model.ok()) << model.message();
    const int64_t V = 300;
    std::mt19937 rng(11);
    std::vector<std::vector<int32_t>> prompts = {std::vector<int32_t>(9), std::vector<int32_t>(3),
                                                 std::vector<int32_t>(12)};
    for (auto& p : prompts)
      for (auto& t : p) t = int32_t(rng() % 300);
    // Alone: prefill all but the last token, then the last token: keep its logits.
    std::vector<std::vector<float>> alone;
    for (const auto& p : prompts) {
      KvCache cache = (*model)->NewKvCache(32);
      std::vector<float> lg(static_cast<size_t>(V));
      ASSERT_TRUE((*model)->Forward({p.data(), p.size() - 1}, cache, LogitsMode::kNone, nullptr).ok());
      ASSERT_TRUE((*model)->Forward({p.data() + p.size() - 1, 1}, cache, LogitsMode::kLast, lg.data()).ok());
      alone.push_back(lg);
    }
    // Together: sequence 0 prefilled first, then its last token batched with the full
    // prefills of 1 and 2 (the last one's final token runs in a second batch).
    std::vector<KvCache> caches;
    for (int i = 0; i < 3; ++i) caches.push_back((*model)->NewKvCache(32));
    ASSERT_TRUE((*model)->Forward({prompts[0].data(), 8}, caches[0], LogitsMode::kNone, nullptr).ok());
    std::vector<BatchItem> batch = {{{prompts[0].data() + 8, 1}, &caches[0], LogitsMode::kLast},
                                    {{prompts[1].data(), 3}, &caches[1], LogitsMode::kLast},
                                    {{prompts[2].data(), 11}, &caches[2], LogitsMode::kNone}};
    std::vector<float> out(size_t(2 * V));
    ASSERT_TRUE((*model)->ForwardBatch(batch, out.data()).ok());
    std::vector<float> last(static_cast<size_t>(V));
    BatchItem tail{{prompts[2].data() + 11, 1}, &caches[2], LogitsMode::kLast};
    ASSERT_TRUE((*model)->ForwardBatch({&tail, 1}, last.data()).ok());
    for (int64_t v = 0; v < V; ++v) {
      EXPECT_NEAR(out[size_t(v)], alone[0][size_t(v)], 1e-4) << preset;
      EXPECT_NEAR(out[size_t(V + v)], alone[1][size_t(v)], 1e-4) << preset;
      EXPECT_NEAR(last[size_t(v)], alone[2][size_t(v)], 1e-4) << preset;
    }
    std::filesystem::remove_all(dir);
  }
}

// A checkpoint saved by transformers >= 5.15 (per_layer_config instead of global_head_dim /
// num_global_key_value_heads) runs exactly as its released-style twin: same weights, same
// logits, bit for bit.
TEST(GemmaModel, PerLayerConfigTwinGivesEqualLogits) {
  for (const char* preset : {"tiny", "tiny-e2b"}) {
    const ModelConfig c = SmallVocab(preset);
    const std::string dir = WriteModel(c, std::string("released_") + preset, DType::kBF16);
    const std::string twin = TestTempDir(std::string("gk_model_test_per_layer_") + preset);
    std::filesystem::create_directories(twin);
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      std::filesystem::copy_file(e.path(), twin + "/" + e.path().filename().string(),
                                 std::filesystem::copy_options::overwrite_existing);
    }
    auto text = ReadFile(dir + "/config.json");
    ASSERT_TRUE(text.ok());
    nlohmann::json j = nlohmann::json::parse(*text);
    nlohmann::json& t = j.contains("text_config") ? j["text_config"] : j;
    nlohmann::json per_layer = nlohmann::json::object();
    for (int l = 0; l < c.num_layers; ++l) {
      if (!c.IsFull(l)) continue;
      nlohmann::json o = {{"head_dim", c.global_head_dim}};
      if (c.attention_k_eq_v) o["num_key_value_heads"] = c.num_global_kv_heads;
      per_layer[std::to_string(l)] = o;
    }
    ASSERT_TRUE(t.contains("global_head_dim"));
    t.erase("global_head_dim");
    t.erase("num_global_key_value_heads");
    t["dtype"] = t["torch_dtype"];
    t.erase("torch_dtype");
    t["per_layer_config"] = per_layer;
    ASSERT_TRUE(WriteFileAtomic(twin + "/config.json", j.dump(2)).ok());

    std::vector<int32_t> tokens(21);
    std::mt19937 rng(5);
    for (auto& tok : tokens) tok = int32_t(rng() % 300);
    const auto a = RunChunked(dir, tokens, 64);
    const auto b = RunChunked(twin, tokens, 64);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << preset;
    std::filesystem::remove_all(dir);
    std::filesystem::remove_all(twin);
  }
}

}  // namespace
}  // namespace gk
