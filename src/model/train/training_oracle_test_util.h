// Test support (included by *_test.cc only): a LoRA runner's gradients against the independent
// PyTorch oracle, tests/oracle/train_ref.py, on the same toy checkpoint, adapter and batch. The
// CPU's TrainingModel (training_oracle_test.cc) and the GPU's CudaTrainingModel
// (model/cuda/cuda_training_oracle_test.cc) run the same cases. Skips when Debian's python3
// cannot import torch.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>

#include "formats/safetensors.h"
#include "model/toy_models_test_util.h"
#include "model/train/training_model.h"
#include "tensor/thread_pool.h"

namespace gk::oracle_test {

inline constexpr const char* kPython = "/usr/bin/python3";

// train.precision "bf16" against the oracle's --bf16-products (docs/TRAIN.md, "Precision"). A
// bf16 rounding is a step: summing in another order flips some roundings, and the toy models
// amplify the flips, so the bound is the oracle's own spread, measured in the same test: its bf16
// gradients against the same with f64 sums and with kSumOrderSamples permuted orders of the
// products' sums, the largest distance. Computing f32 instead of bf16 would give 2.0-4.6 times
// that. The loss: within 4e-4 of itself (measured ≤ 1.6e-4; the oracle's own f32/f64 spread
// reaches 1.4e-4).
inline constexpr double kBf16LossBound = 4e-4, kBf16SpreadFactor = 2.0;
inline constexpr int kSumOrderSamples = 3;

inline bool HaveTorch() {
  return std::system((std::string(kPython) + " -c 'import torch' > /dev/null 2>&1").c_str()) == 0;
}

inline std::string RunCommand(const std::string& cmd, int* rc) {
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
inline Batch MakeBatch(int vocab, bool all_tokens) {
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

inline Status WriteBatch(const Batch& b, const std::string& path) {
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

inline std::vector<float> ReadF32(const SafetensorsFile& f, const std::string& name) {
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
inline std::unique_ptr<SafetensorsFile> RunOracle(const std::string& args, const std::string& work) {
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
inline int64_t RunStep(TrainRunner& tm, const Batch& batch, MicroBatchStats* st) {
  std::vector<TrainRowView> rows;
  int64_t targets = 0;
  for (size_t r = 0; r < batch.tokens.size(); ++r) {
    rows.push_back({batch.tokens[r], batch.masks[r]});
    for (size_t i = 1; i < batch.masks[r].size(); ++i) targets += batch.masks[r][i];
  }
  EXPECT_TRUE(tm.ForwardBackward({rows.data(), 2}, 1.f / float(targets), 0, st).ok());
  EXPECT_TRUE(tm.ForwardBackward({rows.data() + 2, 1}, 1.f / float(targets), 0, st).ok());
  EXPECT_TRUE(tm.GradientsToHost().ok());
  EXPECT_EQ(st->targets, targets);
  return targets;
}

// The largest difference of `got` from `want`, relative to want's largest entry; keeps the
// worst tensor's.
inline void CompareGradient(const std::string& name, const std::vector<float>& want, const std::vector<float>& got,
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

// bf16_precision: gemmakit in train.precision "bf16" against the oracle's --bf16-products (the
// same rounding points), a bf16 checkpoint; the bounds are kBf16*'s.
// ‖got − want‖ / ‖want‖ over every tensor of an adapter's gradient at once.
struct L2Distance {
  double diff = 0, norm = 0;
  void Add(const std::vector<float>& want, const std::vector<float>& got) {
    for (size_t i = 0; i < want.size(); ++i) {
      diff += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
      norm += double(want[i]) * want[i];
    }
  }
  double relative() const { return std::sqrt(diff / std::max(norm, 1e-300)); }
};

// A LoRA runner of `config` on `weights` training `adapter` (the CPU's TrainingModel or the GPU's
// CudaTrainingModel); the tests below run whichever they are given.
using RunnerFactory = std::function<Result<std::unique_ptr<TrainRunner>>(const ModelConfig& config, ModelWeights weights,
                                                                         LoraAdapter* adapter, TrainPrecision precision)>;

inline Result<std::unique_ptr<TrainRunner>> CpuRunner(const ModelConfig& config, ModelWeights weights,
                                                      LoraAdapter* adapter, TrainPrecision precision) {
  static ThreadPool pool(2);
  TrainingModelOptions to;
  to.max_tokens = 128;
  to.precision = precision;
  GK_ASSIGN_OR_RETURN(auto tm, TrainingModel::Create(config, std::move(weights), adapter, &pool, to));
  return std::unique_ptr<TrainRunner>(std::move(tm));
}

// One step's LoRA gradients from `make`'s runner against train_ref.py grads on a toy `preset`
// checkpoint of `dtype`, with a PEFT-initialised adapter whose B is random (both factors get
// gradients). f32: per tensor within 1e-4 of the tensor's largest entry, and the figure printed
// beside the oracle's own f32 against its f64 sums. bf16_precision: see kBf16*.
inline void CheckAgainstOracle(const std::string& preset, DType dtype, bool all_tokens, bool rslora,
                               bool bf16_precision = false, const RunnerFactory& make = CpuRunner,
                               const std::string& runner_tag = "") {
  if (!HaveTorch()) GTEST_SKIP() << kPython << " cannot import torch (Debian python3-torch)";
  const std::string tag = runner_tag + preset + (dtype == DType::kF32 ? "_f32" : "_bf16") +
                          (all_tokens ? "_all" : "_asst") + (bf16_precision ? "_bf16products" : "");
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

  auto tm = make(config, std::move(*weights), &*adapter, bf16_precision ? TrainPrecision::kBf16 : TrainPrecision::kF32);
  ASSERT_TRUE(tm.ok()) << tm.message();
  MicroBatchStats st;
  const int64_t targets = RunStep(**tm, batch, &st);

  const std::string oracle_args = StrCat("grads --model ", model_dir, " --adapter ", work, "/adapter --batch ", work,
                                         "/batch.safetensors --out ", work, "/grads.safetensors");
  auto ref = RunOracle(oracle_args + (bf16_precision ? " --bf16-products" : ""), work);
  ASSERT_NE(ref, nullptr);
  const std::vector<float> ref_loss = ReadF32(*ref, "loss");
  ASSERT_EQ(ref_loss.size(), 1u);
  const double loss = st.loss_sum / double(targets);
  // Per tensor: the largest difference relative to the tensor's largest gradient.
  double worst = 0;
  std::string worst_name;
  std::vector<std::pair<std::string, const std::vector<float>*>> mine;
  for (const LoraModule& m : adapter->modules()) {
    mine.emplace_back(LoraAdapter::KeyA(m), &m.grad_a);
    mine.emplace_back(LoraAdapter::KeyB(m), &m.grad_b);
  }
  for (const auto& [key, got] : mine) CompareGradient(key, ReadF32(*ref, key), *got, &worst, &worst_name);
  if (!bf16_precision) {
    EXPECT_NEAR(loss, ref_loss[0], 1e-5 * std::abs(ref_loss[0])) << tag;
    EXPECT_LT(worst, 1e-4) << tag << ": worst tensor " << worst_name;
    // Beside it, both against the oracle's f64 sums: how far f32 in any order lands from exact.
    std::vector<std::vector<float>> f32_grads;
    for (const auto& [key, got] : mine) f32_grads.push_back(ReadF32(*ref, key));
    ref.reset();
    auto ref64 = RunOracle(oracle_args + " --f64", work);
    ASSERT_NE(ref64, nullptr);
    double worst64 = 0, oracle64 = 0;
    std::string name64, oracle_name64;
    L2Distance l2_gk64, l2_oracle64;
    for (size_t i = 0; i < mine.size(); ++i) {
      const std::vector<float> exact = ReadF32(*ref64, mine[i].first);
      CompareGradient(mine[i].first, exact, *mine[i].second, &worst64, &name64);
      CompareGradient(mine[i].first, exact, f32_grads[i], &oracle64, &oracle_name64);
      l2_gk64.Add(exact, *mine[i].second);
      l2_oracle64.Add(exact, f32_grads[i]);
    }
    std::printf("%s: loss %.6f (oracle %.6f), worst gradient difference %.2e of the tensor's max (%s); against the "
                "oracle's f64: %.2e (%s), L2 %.2e; the oracle's f32 against its f64: %.2e (%s), L2 %.2e\n",
                tag.c_str(), loss, ref_loss[0], worst, worst_name.c_str(), worst64, name64.c_str(), l2_gk64.relative(),
                oracle64, oracle_name64.c_str(), l2_oracle64.relative());
    return;
  }
  // bf16: the oracle in f32 measures what bf16 itself changes; gemmakit must agree with the
  // oracle's bf16 much better than bf16 agrees with f32 (docs/TRAIN.md derives the bounds).
  std::vector<std::vector<float>> bf16_grads;
  for (const auto& [key, got] : mine) bf16_grads.push_back(ReadF32(*ref, key));
  ref.reset();
  auto ref32 = RunOracle(oracle_args, work);
  ASSERT_NE(ref32, nullptr);
  const double loss32 = ReadF32(*ref32, "loss")[0];
  double effect = 0, effect_gk = 0;
  std::string effect_name, effect_gk_name;
  L2Distance l2_gk, l2_effect;
  for (size_t i = 0; i < mine.size(); ++i) {
    const std::vector<float> f32 = ReadF32(*ref32, mine[i].first);
    CompareGradient(mine[i].first, f32, bf16_grads[i], &effect, &effect_name);
    CompareGradient(mine[i].first, f32, *mine[i].second, &effect_gk, &effect_gk_name);
    l2_gk.Add(bf16_grads[i], *mine[i].second);
    l2_effect.Add(f32, bf16_grads[i]);
  }
  ref32.reset();
  // The oracle's own spread: its bf16 gradients against the same with f64 sums, and with the
  // bf16 products' sums in kSumOrderSamples permuted orders; the largest. One sample is not
  // enough where a flip decides a router's top-k (the MoE toy): there the samples measured
  // 1.9e-2 to 1.9e-1 (docs/TRAIN.md).
  std::vector<std::string> variants = {" --bf16-products --f64"};
  for (int seed = 1; seed <= kSumOrderSamples; ++seed) variants.push_back(StrCat(" --bf16-products --permute-sums ", seed));
  double l2_self = 0;
  std::string samples;
  for (const std::string& variant : variants) {
    auto other = RunOracle(oracle_args + variant, work);
    ASSERT_NE(other, nullptr);
    L2Distance d;
    for (size_t i = 0; i < mine.size(); ++i) d.Add(ReadF32(*other, mine[i].first), bf16_grads[i]);
    l2_self = std::max(l2_self, d.relative());
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%.2e", samples.empty() ? "" : ", ", d.relative());
    samples += buf;
  }
  std::printf("%s: loss %.7f, oracle bf16 %.7f, oracle f32 %.7f; gradients (L2 of all tensors): against the oracle's "
              "bf16 %.2e, the oracle's bf16 against itself with f64 sums and %d orders of the products' sums %s "
              "(largest %.2e), bf16 against f32 %.2e; largest entry difference %.2e of its tensor's max (%s; bf16 "
              "against f32 %.2e, gemmakit's %.2e)\n",
              tag.c_str(), loss, ref_loss[0], loss32, l2_gk.relative(), kSumOrderSamples, samples.c_str(), l2_self,
              l2_effect.relative(), worst, worst_name.c_str(), effect, effect_gk);
  EXPECT_NEAR(loss, ref_loss[0], kBf16LossBound * std::abs(ref_loss[0])) << tag;
  EXPECT_LT(l2_gk.relative(), kBf16SpreadFactor * l2_self)
      << tag << ": gemmakit's bf16 gradients are further from the oracle's than its own summation order moves them";
  EXPECT_GT(l2_effect.relative(), 1.5 * l2_self) << tag << ": bf16 changed nothing beyond the noise, "
                                                                     "the case checks nothing";
}


}  // namespace gk::oracle_test
