// The training backward pass against an independent oracle: tests/oracle/train_ref.py computes
// the same loss and every LoRA gradient with PyTorch autograd (written from the spec, not from
// this code) on the same checkpoint, adapter and batch. Both loss modes (assistant-only mask
// and all tokens), Gemma 4 (sliding + full K=V layers, partial RoPE, softcap; E2B's PLE, KV
// sharing and double-wide MLP; 26B-A4B's MoE block) and Gemma 3, rows longer than the sliding
// window, f32 and bf16 base weights. Skips when Debian's python3 cannot import torch. The
// LoRA cases are training_oracle_test_util.h's, which the GPU's runner runs too.
#include <gtest/gtest.h>

#include <filesystem>

#include "model/train/training_oracle_test_util.h"

namespace gk {
namespace {

using namespace oracle_test;

// Full fine-tuning: the gradient of every weight (train_ref.py full-grads). bf16 checkpoints
// compute with the bf16 weights, as the oracle's --bf16-compute does.
void CheckFullAgainstOracle(const std::string& preset, DType dtype, bool all_tokens) {
  if (!HaveTorch()) GTEST_SKIP() << kPython << " cannot import torch (Debian python3-torch)";
  const std::string tag = "full_" + preset + (dtype == DType::kF32 ? "_f32" : "_bf16") + (all_tokens ? "_all" : "_asst");
  const ModelConfig config = ToyConfig(preset, 8);
  const std::string model_dir = WriteToyModel(config, "gk_train_oracle_" + tag, dtype, 29);
  auto weights = LoadWeights(model_dir, config);
  ASSERT_TRUE(weights.ok()) << weights.message();
  const std::string work = TestTempDir("gk_train_oracle_work_" + tag);
  std::filesystem::create_directories(work);
  Batch batch = MakeBatch(config.vocab_size, all_tokens);
  batch.tokens[1][3] = config.pad_token_id;  // a pad token inside a row: its lookup row gets no gradient
  ASSERT_TRUE(WriteBatch(batch, work + "/batch.safetensors").ok());

  ThreadPool pool(2);
  TrainingModelOptions to;
  to.max_tokens = 128;
  to.full_finetune_from = model_dir;
  auto tm = TrainingModel::Create(config, std::move(*weights), nullptr, &pool, to);
  ASSERT_TRUE(tm.ok()) << tm.message();
  MicroBatchStats st;
  const int64_t targets = RunStep(**tm, batch, &st);

  auto ref = RunOracle(StrCat("full-grads --model ", model_dir, " --batch ", work, "/batch.safetensors --out ", work,
                              "/grads.safetensors", dtype == DType::kBF16 ? " --bf16-compute" : ""),
                       work);
  ASSERT_NE(ref, nullptr);
  const std::vector<float> ref_loss = ReadF32(*ref, "loss");
  ASSERT_EQ(ref_loss.size(), 1u);
  EXPECT_NEAR(st.loss_sum / double(targets), ref_loss[0], 1e-5 * std::abs(ref_loss[0])) << tag;
  const FullParams& fp = *(*tm)->full_params();
  EXPECT_EQ(int64_t(ref->tensors().size()) - 2, int64_t(fp.params().size())) << "trainable tensor count";
  double worst = 0;
  std::string worst_name;
  for (const FullParam& p : fp.params()) {
    CompareGradient(p.name, ReadF32(*ref, p.name), p.grad, &worst, &worst_name);
  }
  EXPECT_LT(worst, 1e-4) << tag << ": worst tensor " << worst_name;
  std::printf("%s: loss %.6f (oracle %.6f), %zu tensors, worst gradient difference %.2e of the tensor's max (%s)\n",
              tag.c_str(), st.loss_sum / double(targets), ref_loss[0], fp.params().size(), worst, worst_name.c_str());
}

TEST(TrainingOracle, FullFineTuneGemma4F32) { CheckFullAgainstOracle("tiny", DType::kF32, true); }
TEST(TrainingOracle, FullFineTuneGemma4Bf16) { CheckFullAgainstOracle("tiny", DType::kBF16, false); }
TEST(TrainingOracle, FullFineTunePleKvSharingF32) { CheckFullAgainstOracle("tiny-e2b", DType::kF32, true); }
TEST(TrainingOracle, FullFineTuneMoeF32) { CheckFullAgainstOracle("tiny-moe", DType::kF32, true); }
TEST(TrainingOracle, FullFineTuneGemma3F32) { CheckFullAgainstOracle("gemma3-270m", DType::kF32, false); }

TEST(TrainingOracle, Gemma4AssistantLossF32) { CheckAgainstOracle("tiny", DType::kF32, false, false); }
TEST(TrainingOracle, Gemma4AllTokensF32) { CheckAgainstOracle("tiny", DType::kF32, true, false); }
TEST(TrainingOracle, Gemma4AssistantLossBf16Base) { CheckAgainstOracle("tiny", DType::kBF16, false, true); }
// E2B's features: per-layer embeddings, KV sharing (the last two layers read layers 2 and 3's
// K/V and send their gradient back), the double-wide MLP of the shared layers.
TEST(TrainingOracle, Gemma4PleKvSharingF32) { CheckAgainstOracle("tiny-e2b", DType::kF32, false, false); }
TEST(TrainingOracle, Gemma4PleKvSharingBf16AllTokens) { CheckAgainstOracle("tiny-e2b", DType::kBF16, true, false); }
// 26B-A4B's MoE block: 8 experts, top 2, gradients through the experts and the routing weights.
TEST(TrainingOracle, Gemma4MoeF32) { CheckAgainstOracle("tiny-moe", DType::kF32, true, false); }
TEST(TrainingOracle, Gemma4MoeBf16Base) { CheckAgainstOracle("tiny-moe", DType::kBF16, false, true); }
TEST(TrainingOracle, Gemma3AllTokensF32) { CheckAgainstOracle("gemma3-270m", DType::kF32, true, false); }
TEST(TrainingOracle, Gemma3AssistantLossF32RsLora) { CheckAgainstOracle("gemma3-270m", DType::kF32, false, true); }
// train.precision "bf16" (the default) against the oracle's --bf16-products.
TEST(TrainingOracle, Gemma4Bf16Precision) { CheckAgainstOracle("tiny", DType::kBF16, false, false, true); }
TEST(TrainingOracle, Gemma4PleKvSharingBf16Precision) { CheckAgainstOracle("tiny-e2b", DType::kBF16, true, false, true); }
TEST(TrainingOracle, Gemma4MoeBf16Precision) { CheckAgainstOracle("tiny-moe", DType::kBF16, true, false, true); }
TEST(TrainingOracle, Gemma3Bf16Precision) { CheckAgainstOracle("gemma3-270m", DType::kBF16, true, true, true); }

}  // namespace
}  // namespace gk
