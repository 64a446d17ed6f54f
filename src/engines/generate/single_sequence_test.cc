// SingleSequence (one sequence through a runner's paged pool, a ring of blocks on sliding
// layers) against GemmaModel::Forward over its own KvCache: the same logits, on prompts and
// decodes long past the sliding window, whole or in passes of max_chunk.
#include "engines/generate/single_sequence.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "model/gemma_model.h"
#include "model/toy_models_test_util.h"

namespace gk {
namespace {

double MaxRelDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, double(std::fabs(a[i] - b[i])));
    den = std::max(den, double(std::fabs(b[i])));
  }
  return num / den;
}

class SingleSequenceTest : public ::testing::TestWithParam<const char*> {};

TEST_P(SingleSequenceTest, MatchesTheContiguousCache) {
  const ModelConfig config = ToyConfig(GetParam(), 6);
  const std::string dir = WriteToyModel(config, StrCat("gk_single_seq_", GetParam()), DType::kF32, 5);
  ThreadPool threads(2);
  ModelLoadOptions lo;
  lo.max_chunk = 8;  // a 30-token prompt runs as 4 passes, each seeing the window across blocks
  auto model = GemmaModel::Load(dir, &threads, lo);
  ASSERT_TRUE(model.ok()) << model.message();
  const int64_t V = config.vocab_size, prompt_len = 30, max_tokens = 60;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> tok(3, int32_t(V) - 1);
  std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
  for (int32_t& t : prompt) t = tok(rng);

  KvCache cache = (*model)->NewKvCache(max_tokens);
  auto seq = SingleSequence::Create(**model, max_tokens, DType::kUnknown, /*block_size=*/4);
  ASSERT_TRUE(seq.ok()) << seq.message();
  std::vector<float> want(size_t(prompt_len * V)), got(size_t(prompt_len * V));
  ASSERT_TRUE((*model)->Forward(prompt, cache, LogitsMode::kAll, want.data()).ok());
  ASSERT_TRUE(seq->Forward(prompt, LogitsMode::kAll, got.data()).ok());
  EXPECT_LT(MaxRelDiff(got, want), 1e-5);
  want.resize(size_t(V));
  got.resize(size_t(V));
  for (int64_t i = prompt_len; i < max_tokens; ++i) {
    const int32_t next = tok(rng);
    ASSERT_TRUE((*model)->Forward({&next, 1}, cache, LogitsMode::kLast, want.data()).ok());
    ASSERT_TRUE(seq->Forward({&next, 1}, LogitsMode::kLast, got.data()).ok());
    ASSERT_LT(MaxRelDiff(got, want), 1e-5) << "position " << i;
  }
  EXPECT_EQ(seq->num_tokens(), max_tokens);
  const int32_t one = 5;
  const Status full = seq->Forward({&one, 1}, LogitsMode::kLast, got.data());
  EXPECT_FALSE(full.ok());
  EXPECT_NE(full.message().find("exceeds the context of 60 tokens"), std::string::npos) << full.message();
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Presets, SingleSequenceTest, ::testing::Values("tiny", "tiny-e2b", "gemma3-270m"));

}  // namespace
}  // namespace gk
