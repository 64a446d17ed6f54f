// The GPU trainer's forward and backward passes against the CPU trainer's (TrainingModel, itself
// checked step for step against PyTorch + PEFT): the same checkpoint, the same adapter (B ≠ 0),
// the same packed micro-batch of three rows with loss masks; the loss, the accuracy and every
// LoRA gradient. f32 weights and precision: within 1e-4 of each tensor's largest gradient.
// Two micro-batches accumulate; with LoRA dropout, both draw the same masks. Dense Gemma 4,
// E2B's features (tiny-e2b), the MoE block (tiny-moe) and Gemma 3. Label cuda: skipped without a GPU.
#include "model/cuda/cuda_training_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include "kernels/cuda/cuda_test_util.h"
#include "model/toy_models_test_util.h"
#include "model/train/lora_test_util.h"
#include "model/train/training_model.h"
#include "tensor/thread_pool.h"

namespace gk {
namespace {

struct Rows {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<uint8_t>> masks;
  std::vector<TrainRowView> views;
  Rows(std::mt19937& rng, int vocab) {
    std::uniform_int_distribution<int32_t> tok(3, vocab - 1);
    for (int len : {23, 9, 40}) {
      tokens.emplace_back(size_t(len));
      masks.emplace_back(size_t(len), 1);
      for (int32_t& t : tokens.back()) t = tok(rng);
      for (int i = 0; i < len / 3; ++i) masks.back()[size_t(i)] = 0;  // a prompt without loss
    }
    for (size_t i = 0; i < tokens.size(); ++i) views.push_back({tokens[i], masks[i]});
  }
};

void Compare(const char* preset, DType weights, TrainPrecision precision, double tolerance, double dropout = 0) {
  const ModelConfig c = ToyConfig(preset, 7);
  const std::string dir = WriteToyModel(c, std::string("gk_cuda_train_") + preset, weights, 11);
  LoraOptions lo;
  lo.rank = 4;
  lo.alpha = 8;
  lo.dropout = dropout;
  LoraAdapter cpu_adapter = RandomLoraAdapter(c, "model.", lo, 5, 0.05f);
  LoraAdapter gpu_adapter = RandomLoraAdapter(c, "model.", lo, 5, 0.05f);
  ThreadPool pool(2);
  auto cpu_w = LoadWeights(dir, c);
  auto gpu_w = LoadWeights(dir, c);
  ASSERT_TRUE(cpu_w.ok() && gpu_w.ok()) << cpu_w.message();
  TrainingModelOptions to;
  to.precision = precision;
  to.max_tokens = 128;
  auto cpu = TrainingModel::Create(c, std::move(*cpu_w), &cpu_adapter, &pool, to);
  ASSERT_TRUE(cpu.ok()) << cpu.message();
  CudaTrainingOptions go;
  go.precision = precision;
  go.max_tokens = 128;
  auto gpu = CudaTrainingModel::Create(c, *gpu_w, &gpu_adapter, go);
  ASSERT_TRUE(gpu.ok()) << gpu.message();
  std::mt19937 rng(std::random_device{}());
  MicroBatchStats cs, gs;
  for (int micro = 0; micro < 2; ++micro) {
    const Rows rows(rng, c.vocab_size);
    ASSERT_TRUE((*cpu)->ForwardBackward(rows.views, 0.01f, 77 + micro, &cs).ok());
    const Status st = (*gpu)->ForwardBackward(rows.views, 0.01f, 77 + micro, &gs);
    ASSERT_TRUE(st.ok()) << st.message();
  }
  ASSERT_TRUE((*gpu)->DownloadGradients().ok());
  EXPECT_EQ(gs.targets, cs.targets);
  EXPECT_EQ(gs.tokens, cs.tokens);
  EXPECT_NEAR(gs.loss_sum, cs.loss_sum, tolerance * cs.loss_sum) << preset;
  EXPECT_NEAR(double(gs.correct), double(cs.correct), 1.0) << preset;  // a near-tie may flip one
  for (size_t i = 0; i < cpu_adapter.modules().size(); ++i) {
    const LoraModule& a = cpu_adapter.modules()[i];
    const LoraModule& b = gpu_adapter.modules()[i];
    EXPECT_LT(cuda::RelErr(b.grad_a, a.grad_a), tolerance) << preset << " " << a.name << " A";
    EXPECT_LT(cuda::RelErr(b.grad_b, a.grad_b), tolerance) << preset << " " << a.name << " B";
  }
  // The device's gradients were zeroed by the download; an evaluation adds none.
  MicroBatchStats es;
  const Rows rows(rng, c.vocab_size);
  ASSERT_TRUE((*gpu)->Evaluate(rows.views, &es).ok());
  ASSERT_TRUE((*gpu)->DownloadGradients().ok());
  for (const LoraModule& m : gpu_adapter.modules()) {
    EXPECT_TRUE(std::all_of(m.grad_a.begin(), m.grad_a.end(), [](float x) { return x == 0.f; })) << m.name;
  }
  EXPECT_GT(es.loss_sum, 0.0);
  std::filesystem::remove_all(dir);
}

TEST(CudaTrainingModel, GradientsMatchTheCpuTrainer) {
  SKIP_WITHOUT_GPU();
  Compare("tiny", DType::kF32, TrainPrecision::kF32, 1e-4);
  Compare("gemma3-270m", DType::kF32, TrainPrecision::kF32, 1e-4);
  // Per-layer embeddings, KV sharing (the shared layers' dK/dV reach their source layer), double-wide MLP.
  Compare("tiny-e2b", DType::kF32, TrainPrecision::kF32, 1e-4);
  Compare("tiny-e2b", DType::kBF16, TrainPrecision::kBf16, 2e-2);
  // The MoE block: experts on their slots, the routing weights' gradient through the host's routing.
  Compare("tiny-moe", DType::kF32, TrainPrecision::kF32, 1e-4);
  Compare("tiny-moe", DType::kBF16, TrainPrecision::kBf16, 2e-2);
  Compare("tiny", DType::kBF16, TrainPrecision::kBf16, 2e-2);
  Compare("tiny", DType::kF32, TrainPrecision::kF32, 1e-4, /*dropout=*/0.1);  // the same masks as the CPU's
}

// (No GPU needed: the check runs before any device call.)
TEST(CudaTrainingModel, RunsEveryVariantAndRefusesFullFineTuning) {
  for (const char* preset : {"tiny", "gemma3-270m", "tiny-e2b", "tiny-moe"}) {  // what GradientsMatchTheCpuTrainer runs
    const ModelConfig c = ToyConfig(preset, 7);
    LoraOptions lo;
    auto a = LoraAdapter::Create(c, "model.", lo);
    ASSERT_TRUE(a.ok());
    EXPECT_TRUE(CheckCudaTrainingSupport(c, &*a).ok()) << preset;
  }
  const ModelConfig tiny = ToyConfig("tiny", 7);
  EXPECT_NE(CheckCudaTrainingSupport(tiny, nullptr).message().find("full fine-tuning"), std::string::npos);
}

}  // namespace
}  // namespace gk
