// The training backward pass against an independent oracle: tests/oracle/train_ref.py computes
// the same loss and every LoRA gradient with PyTorch autograd (written from the spec, not from
// this code) on the same checkpoint, adapter and batch. Both loss modes (assistant-only mask
// and all tokens), Gemma 4 (sliding + full K=V layers, partial RoPE, softcap; E2B's PLE, KV
// sharing and double-wide MLP; 26B-A4B's MoE block) and Gemma 3, rows longer than the sliding
// window, f32 and bf16 base weights. Skips when Debian's python3
// cannot import torch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "formats/safetensors.h"
#include "model/toy_models_test_util.h"
#include "model/train/training_model.h"

namespace gk {
namespace {

constexpr const char* kPython = "/usr/bin/python3";

bool HaveTorch() {
  return std::system((std::string(kPython) + " -c 'import torch' > /dev/null 2>&1").c_str()) == 0;
}

std::string RunCommand(const std::string& cmd, int* rc) {
  FILE* pipe = popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  while (pipe && fgets(buf, sizeof buf, pipe)) out += buf;
  *rc = pipe ? pclose(pipe) : -1;
  return out;
}

struct Batch {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<uint8_t>> masks;
};

// Rows of 40, 25 and 9 tokens; "assistant": targets in the second half of each row.
Batch MakeBatch(int vocab, bool all_tokens) {
  Batch b;
  std::mt19937_64 rng(17);
  for (int len : {40, 25, 9}) {
    std::vector<int32_t> t(static_cast<size_t>(len));
    for (auto& x : t) x = int32_t(rng() % uint64_t(vocab));
    std::vector<uint8_t> m(static_cast<size_t>(len), 0);
    for (int i = all_tokens ? 1 : len / 2; i < len; ++i) m[size_t(i)] = 1;
    b.tokens.push_back(std::move(t));
    b.masks.push_back(std::move(m));
  }
  return b;
}

Status WriteBatch(const Batch& b, const std::string& path) {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> mask;
  std::vector<int64_t> offsets = {0};
  for (size_t r = 0; r < b.tokens.size(); ++r) {
    tokens.insert(tokens.end(), b.tokens[r].begin(), b.tokens[r].end());
    mask.insert(mask.end(), b.masks[r].begin(), b.masks[r].end());
    offsets.push_back(int64_t(tokens.size()));
  }
  auto copy = [](const void* src) {
    return [src](uint8_t* dst, size_t n) {
      std::memcpy(dst, src, n);
      return Status::Ok();
    };
  };
  return WriteSafetensors(path, {{"tokens", DType::kI32, {int64_t(tokens.size())}, copy(tokens.data())},
                                 {"loss_mask", DType::kU8, {int64_t(mask.size())}, copy(mask.data())},
                                 {"offsets", DType::kI64, {int64_t(offsets.size())}, copy(offsets.data())}});
}

std::vector<float> ReadF32(const SafetensorsFile& f, const std::string& name) {
  for (const TensorInfo& t : f.tensors()) {
    if (t.name != name) continue;
    EXPECT_EQ(t.dtype, DType::kF32) << name;
    std::vector<float> v(size_t(t.numel()));
    EXPECT_TRUE(f.ReadInto(t, v.data()).ok());
    return v;
  }
  ADD_FAILURE() << "oracle output lacks " << name;
  return {};
}

// Runs tests/oracle/train_ref.py with `args` (which name WORK/grads.safetensors as --out) and
// opens what it wrote; null, with the failure recorded, when it did not run.
std::unique_ptr<SafetensorsFile> RunOracle(const std::string& args, const std::string& work) {
  int rc = 0;
  const std::string out = RunCommand(StrCat(kPython, " ", GK_SOURCE_DIR, "/tests/oracle/train_ref.py ", args), &rc);
  if (rc != 0) {
    ADD_FAILURE() << out;
    return nullptr;
  }
  auto ref = SafetensorsFile::Open(work + "/grads.safetensors");
  if (!ref.ok()) {
    ADD_FAILURE() << ref.message();
    return nullptr;
  }
  return std::move(*ref);
}

// One optimizer step's gradient: two micro-batches (rows 0-1 packed, row 2 alone) accumulated,
// each scaled by 1 / the step's targets. Returns the target count.
int64_t RunStep(TrainingModel& tm, const Batch& batch, MicroBatchStats* st) {
  std::vector<TrainRowView> rows;
  int64_t targets = 0;
  for (size_t r = 0; r < batch.tokens.size(); ++r) {
    rows.push_back({batch.tokens[r], batch.masks[r]});
    for (size_t i = 1; i < batch.masks[r].size(); ++i) targets += batch.masks[r][i];
  }
  EXPECT_TRUE(tm.ForwardBackward({rows.data(), 2}, 1.f / float(targets), 0, st).ok());
  EXPECT_TRUE(tm.ForwardBackward({rows.data() + 2, 1}, 1.f / float(targets), 0, st).ok());
  EXPECT_EQ(st->targets, targets);
  return targets;
}

// The largest difference of `got` from `want`, relative to want's largest entry; keeps the
// worst tensor's.
void CompareGradient(const std::string& name, const std::vector<float>& want, const std::vector<float>& got,
                     double* worst, std::string* worst_name) {
  ASSERT_EQ(want.size(), got.size()) << name;
  double scale = 0, diff = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, double(std::abs(want[i])));
    diff = std::max(diff, std::abs(double(got[i]) - double(want[i])));
  }
  ASSERT_GT(scale, 0) << name << ": the oracle's gradient is zero, the case checks nothing";
  if (diff / scale > *worst) *worst = diff / scale, *worst_name = name;
}

void CheckAgainstOracle(const std::string& preset, DType dtype, bool all_tokens, bool rslora) {
  if (!HaveTorch()) GTEST_SKIP() << kPython << " cannot import torch (Debian python3-torch)";
  const std::string tag = preset + (dtype == DType::kF32 ? "_f32" : "_bf16") + (all_tokens ? "_all" : "_asst");
  const ModelConfig config = ToyConfig(preset, 8);
  const std::string model_dir = WriteToyModel(config, "gk_train_oracle_" + tag, dtype, 23);
  auto weights = LoadWeights(model_dir, config);
  ASSERT_TRUE(weights.ok()) << weights.message();
  LoraOptions lo;
  lo.rank = 4;
  lo.alpha = 8;
  lo.use_rslora = rslora;
  auto adapter = LoraAdapter::Create(config, weights->prefix, lo);
  ASSERT_TRUE(adapter.ok()) << adapter.message();
  adapter->InitPeft(3);
  std::mt19937_64 rng(4);
  std::normal_distribution<float> nd(0.f, 0.05f);
  for (LoraModule& m : adapter->modules()) {
    for (float& v : m.b) v = nd(rng);
  }
  const std::string work = TestTempDir("gk_train_oracle_work_" + tag);
  ASSERT_TRUE(adapter->SavePeft(work + "/adapter", model_dir).ok());
  const Batch batch = MakeBatch(config.vocab_size, all_tokens);
  ASSERT_TRUE(WriteBatch(batch, work + "/batch.safetensors").ok());

  ThreadPool pool(2);
  TrainingModelOptions to;
  to.max_tokens = 128;
  auto tm = TrainingModel::Create(config, std::move(*weights), &*adapter, &pool, to);
  ASSERT_TRUE(tm.ok()) << tm.message();
  MicroBatchStats st;
  const int64_t targets = RunStep(**tm, batch, &st);

  auto ref = RunOracle(StrCat("grads --model ", model_dir, " --adapter ", work, "/adapter --batch ", work,
                              "/batch.safetensors --out ", work, "/grads.safetensors"),
                       work);
  ASSERT_NE(ref, nullptr);
  const std::vector<float> ref_loss = ReadF32(*ref, "loss");
  ASSERT_EQ(ref_loss.size(), 1u);
  EXPECT_NEAR(st.loss_sum / double(targets), ref_loss[0], 1e-5 * std::abs(ref_loss[0])) << tag;
  // Per tensor: the largest difference relative to the tensor's largest gradient.
  double worst = 0;
  std::string worst_name;
  for (const LoraModule& m : adapter->modules()) {
    for (int which = 0; which < 2; ++which) {
      const std::string key = which ? LoraAdapter::KeyB(m) : LoraAdapter::KeyA(m);
      const std::vector<float> want = ReadF32(*ref, key);
      CompareGradient(key, want, which ? m.grad_b : m.grad_a, &worst, &worst_name);
    }
  }
  EXPECT_LT(worst, 1e-4) << tag << ": worst tensor " << worst_name;
  std::printf("%s: loss %.6f (oracle %.6f), worst gradient difference %.2e of the tensor's max (%s)\n", tag.c_str(),
              st.loss_sum / double(targets), ref_loss[0], worst, worst_name.c_str());
}

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

}  // namespace
}  // namespace gk
