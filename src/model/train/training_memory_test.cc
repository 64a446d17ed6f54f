// The memory estimate (used by `gemmakit plan` and by the trainer's check before a full
// fine-tune) against what the real trainer allocates: for every toy Gemma 4 variant (dense,
// PLE + KV sharing, MoE) and Gemma 3, with and without LoRA and remat, TrainingActivationBytes
// must equal TrainingModel::activation_bytes() after a forward/backward pass, byte for byte;
// FullFineTuneParameters must equal the elements FullParams trains.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "kernels/loss_head_chunk.h"
#include "model/train/full_params.h"
#include "model/train/lora.h"
#include "model/train/training_model.h"
#include "model/toy_models_test_util.h"
#include "model/weights.h"
#include "tensor/thread_pool.h"
#include "model/train/training_memory.h"

namespace gk {
namespace {

int64_t MeasuredActivationBytes(const ModelConfig& c, const std::string& dir, int rank, bool remat, int tokens) {
  ThreadPool pool(2);
  auto w = LoadWeights(dir, c);
  EXPECT_TRUE(w.ok()) << w.message();
  const std::string prefix = w->prefix;
  std::unique_ptr<LoraAdapter> adapter;
  if (rank > 0) {
    LoraOptions o;
    o.rank = rank;
    o.alpha = 2.0 * rank;
    auto a = LoraAdapter::Create(c, prefix, o);
    EXPECT_TRUE(a.ok()) << a.message();
    a->InitPeft(1);
    adapter = std::make_unique<LoraAdapter>(std::move(*a));
  }
  TrainingModelOptions o;
  o.remat = remat;
  o.max_tokens = 256;
  auto m = TrainingModel::Create(c, std::move(*w), adapter.get(), &pool, o);
  EXPECT_TRUE(m.ok()) << m.message();
  std::mt19937_64 rng(3);
  std::vector<int32_t> ids(static_cast<size_t>(tokens));
  for (auto& t : ids) t = int32_t(rng() % uint64_t(c.vocab_size));
  std::vector<uint8_t> mask(ids.size(), 1);
  TrainRowView row{ids, mask};
  EXPECT_TRUE((*m)->ForwardBackward({&row, 1}, 1.f, 0, nullptr).ok());
  return (*m)->activation_bytes();
}

TEST(TrainingMemory, ActivationsMatchTheTrainersBuffers) {
  for (const char* preset : {"tiny", "tiny-e2b", "tiny-moe", "gemma3-270m"}) {
    const ModelConfig c = ToyConfig(preset, 5);
    const std::string dir = WriteToyModel(c, std::string("gk_plan_act_") + preset, DType::kF32, 7);
    for (int rank : {0, 4}) {
      for (bool remat : {false, true}) {
        const int T = 37;
        const int64_t measured = MeasuredActivationBytes(c, dir, rank, remat, T);
        const int64_t estimated = TrainingActivationBytes(c, {T, rank, remat, 4});
        EXPECT_EQ(estimated, measured) << preset << " rank " << rank << " remat " << remat;
      }
    }
  }
}

TEST(TrainingMemory, FullFineTuneParametersAreWhatFullParamsTrains) {
  for (const char* preset : {"tiny", "tiny-e2b", "tiny-moe", "gemma3-270m"}) {
    const ModelConfig c = ToyConfig(preset, 5);
    const std::string dir = WriteToyModel(c, std::string("gk_full_params_") + preset, DType::kBF16, 7);
    auto w = LoadWeights(dir, c);
    ASSERT_TRUE(w.ok()) << w.message();
    auto fp = FullParams::Create(dir, c, &*w);
    ASSERT_TRUE(fp.ok()) << fp.message();
    EXPECT_EQ(FullFineTuneParameters(c), fp->ParameterCount()) << preset;
    const FullFineTuneMemory m = EstimateFullFineTune(c, 2, 64, true);
    EXPECT_EQ(m.params, fp->ParameterCount());
    EXPECT_GT(m.total, 18.0 * double(m.params));  // 2 + 4 + 4 + 8 B per parameter, plus activations
  }
}

// LoRA's count is the adapter's (every projection adapted), and the GPU trainer's estimate adds
// up its items: 8 B per trainable parameter for factors and gradients, 2 B per weight.
TEST(TrainingMemory, LoraParametersAreTheAdaptersAndTheGpuEstimateAddsUp) {
  for (const char* preset : {"tiny", "tiny-e2b", "tiny-moe", "gemma3-270m"}) {
    const ModelConfig c = ToyConfig(preset, 5);
    LoraOptions o;
    o.rank = 6;
    auto a = LoraAdapter::Create(c, "model.", o);
    ASSERT_TRUE(a.ok()) << a.message();
    int64_t n = 0;
    for (const LoraModule& m : a->modules()) n += int64_t(m.a.size() + m.b.size());
    EXPECT_EQ(LoraParameters(c, 6), n) << preset;
    EXPECT_EQ(a->ParameterCount(), n);
    const GpuLoraMemory g = EstimateGpuLoraTraining(c, {.tokens = 300, .rank = 6});
    EXPECT_EQ(g.trainable, n);
    double sum = 0;
    for (const MemoryItem& i : g.items) sum += i.bytes;
    EXPECT_DOUBLE_EQ(g.total, sum);
    EXPECT_GT(g.total, 8.0 * double(n) + 2.0 * double(c.ParameterCount()));
    // An f32 checkpoint stays f32 on the device (model/cuda/device_weights.h): 2 B more per weight.
    const GpuLoraMemory f32 = EstimateGpuLoraTraining(c, {.tokens = 300, .rank = 6, .weight_bytes = 4});
    EXPECT_DOUBLE_EQ(f32.total - g.total, 2.0 * double(c.ParameterCount())) << preset;
    EXPECT_EQ(f32.items[0].what, "base weights (f32)");
  }
}

// The loss head's chunk is 256 rows at least and the whole vocabulary at most, also where the
// vocabulary has fewer than 256 rows. That case was a std::clamp with crossed bounds: undefined
// behaviour, which libstdc++'s assertions stop (scripts/sanitize.sh) and libc++ answers with 256.
TEST(TrainingMemory, TheLossHeadsChunkIsNeverWiderThanTheVocabulary) {
  ModelConfig c = ToyConfig("tiny", 5);
  c.vocab_size = 100;
  const int64_t T = 400000;  // long enough that the 256 MiB budget allows under 256 rows
  const GpuLoraMemory g = EstimateGpuLoraTraining(c, {.tokens = T, .rank = 6});
  const auto head = std::find_if(g.items.begin(), g.items.end(),
                                 [](const MemoryItem& i) { return i.what == "loss head (f32)"; });
  ASSERT_NE(head, g.items.end());
  EXPECT_DOUBLE_EQ(head->bytes, 4.0 * 100 * T + 5.0 * 4 * T);
}

// The one rule the GPU loss head allocates by and plan counts by (kernels/loss_head_chunk.h).
TEST(TrainingMemory, TheLossHeadsChunkHoldsAQuarterGibibyteOfLogits) {
  EXPECT_EQ(LossHeadChunkRows(1, 262144), 262144);           // one row: the whole vocabulary
  EXPECT_EQ(LossHeadChunkRows(8 * 3072, 262144), 2730);      // 2730 × 24,576 × 4 B ≤ 256 MiB
  EXPECT_EQ(LossHeadChunkRows(int64_t(1) << 30, 262144), 256);  // never narrower than 256 rows
  EXPECT_EQ(LossHeadChunkRows(int64_t(1) << 30, 100), 100);     // nor wider than the vocabulary
  EXPECT_EQ(LossHeadChunkRows(0, 0), 1);
}

}  // namespace
}  // namespace gk
