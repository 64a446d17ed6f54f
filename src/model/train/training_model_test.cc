// Self-consistency of the training forward/backward pass. The independent check (gradients
// against PyTorch autograd) is training_oracle_test.cc; these catch what that cannot isolate:
// the LoRA-free forward equals the inference engine's, packing equals separate rows, remat
// changes nothing, and finite differences agree with the backward pass.
#include "model/train/training_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "model/gemma_model.h"
#include "model/toy_models_test_util.h"
#include "model/train/lora_test_util.h"

namespace gk {
namespace {

struct Fixture {
  ModelConfig config;
  std::string dir;
};

Fixture ToyModel(const std::string& preset, DType dtype, int window = 5) {
  Fixture f;
  f.config = ToyConfig(preset, window);
  f.dir = WriteToyModel(f.config, "gk_train_test_" + preset + (dtype == DType::kF32 ? "_f32" : "_bf16"), dtype, 11);
  return f;
}

std::vector<int32_t> RandomTokens(int n, uint64_t seed, int vocab) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = int32_t(rng() % uint64_t(vocab));
  return t;
}

std::unique_ptr<TrainingModel> MakeModel(const Fixture& f, LoraAdapter* adapter, ThreadPool* pool, bool remat = false) {
  auto w = LoadWeights(f.dir, f.config);
  EXPECT_TRUE(w.ok()) << w.message();
  TrainingModelOptions o;
  o.remat = remat;
  o.max_tokens = 256;
  auto m = TrainingModel::Create(f.config, std::move(*w), adapter, pool, o);
  EXPECT_TRUE(m.ok()) << m.message();
  return std::move(*m);
}

LoraAdapter MakeAdapter(const Fixture& f, const std::string& prefix, uint64_t seed, double dropout = 0) {
  LoraOptions o;
  o.rank = 4;
  o.alpha = 8;
  o.dropout = dropout;
  return RandomLoraAdapter(f.config, prefix, o, seed, 0.05f);
}

TEST(TrainingModel, LogitsWithoutLoraEqualTheInferenceEngine) {
  for (const char* preset : {"tiny", "tiny-e2b", "tiny-moe", "gemma3-270m"}) {
    Fixture f = ToyModel(preset, DType::kF32);
    ThreadPool pool(2);
    auto tm = MakeModel(f, nullptr, &pool);
    const auto tokens = RandomTokens(23, 3, f.config.vocab_size);
    const int64_t V = f.config.vocab_size;
    std::vector<float> got(tokens.size() * size_t(V)), want(got.size());
    ASSERT_TRUE(tm->Logits(tokens, got.data()).ok());
    ModelLoadOptions lo;
    lo.pack = false;
    auto engine = GemmaModel::Load(f.dir, &pool, lo);
    ASSERT_TRUE(engine.ok());
    KvCache cache = (*engine)->NewKvCache(int64_t(tokens.size()));
    ASSERT_TRUE((*engine)->Forward(tokens, cache, LogitsMode::kAll, want.data()).ok());
    double max_diff = 0;
    for (size_t i = 0; i < got.size(); ++i) max_diff = std::max(max_diff, double(std::abs(got[i] - want[i])));
    EXPECT_LT(max_diff, 2e-3) << preset;
  }
}

TEST(TrainingModel, RejectsBadInput) {
  Fixture f = ToyModel("tiny", DType::kF32);
  ThreadPool pool(2);
  auto tm = MakeModel(f, nullptr, &pool);
  std::vector<int32_t> bad = {1, 2, 999};
  std::vector<uint8_t> mask = {0, 1, 1};
  TrainRowView row{bad, mask};
  MicroBatchStats st;
  Status s = tm->ForwardBackward({&row, 1}, 1.f, 0, &st);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("outside the vocabulary"), std::string::npos) << s.message();
  std::vector<int32_t> ok = {1, 2};
  TrainRowView short_mask{ok, std::span<const uint8_t>(mask.data(), 1)};
  EXPECT_FALSE(tm->ForwardBackward({&short_mask, 1}, 1.f, 0, &st).ok());
  std::vector<int32_t> longrow(300, 1);
  std::vector<uint8_t> longmask(300, 1);
  TrainRowView too_long{longrow, longmask};
  EXPECT_FALSE(tm->ForwardBackward({&too_long, 1}, 1.f, 0, &st).ok());
}

// Loss of the adapter's current values (no dropout).
double Loss(TrainingModel& tm, std::span<const TrainRowView> rows) {
  MicroBatchStats st;
  EXPECT_TRUE(tm.Evaluate(rows, &st).ok());
  return st.loss_sum / double(st.targets);
}

TEST(TrainingModel, GradientsMatchFiniteDifferences) {
  Fixture f = ToyModel("tiny", DType::kF32);
  ThreadPool pool(2);
  auto w = LoadWeights(f.dir, f.config);
  ASSERT_TRUE(w.ok());
  LoraAdapter adapter = MakeAdapter(f, w->prefix, 5);
  auto tm = MakeModel(f, &adapter, &pool);
  const auto tokens = RandomTokens(40, 9, f.config.vocab_size);
  std::vector<uint8_t> mask(tokens.size(), 0);
  for (size_t i = 20; i < mask.size(); ++i) mask[i] = 1;
  TrainRowView row{tokens, mask};
  MicroBatchStats st;
  ASSERT_TRUE(tm->ForwardBackward({&row, 1}, 1.f / 20.f, 0, &st).ok());
  EXPECT_EQ(st.targets, 20);
  int checked = 0;
  for (LoraModule& m : adapter.modules()) {
    for (int which = 0; which < 2; ++which) {
      std::vector<float>& p = which ? m.b : m.a;
      const std::vector<float>& g = which ? m.grad_b : m.grad_a;
      // The entry with the largest gradient: finite differences are most reliable there.
      size_t i = size_t(std::max_element(g.begin(), g.end(), [](float x, float y) { return std::abs(x) < std::abs(y); }) -
                        g.begin());
      const float h = 2e-3f, saved = p[i];
      p[i] = saved + h;
      const double lp = Loss(*tm, {&row, 1});
      p[i] = saved - h;
      const double lm = Loss(*tm, {&row, 1});
      p[i] = saved;
      const double fd = (lp - lm) / (2 * h);
      EXPECT_NEAR(fd, g[i], 2e-2 * std::abs(fd) + 1e-4) << m.name << (which ? " B" : " A") << " [" << i << "]";
      ++checked;
    }
  }
  EXPECT_EQ(checked, int(adapter.modules().size()) * 2);
}

void ZeroGrads(LoraAdapter& a) {
  for (LoraModule& m : a.modules()) {
    std::fill(m.grad_a.begin(), m.grad_a.end(), 0.f);
    std::fill(m.grad_b.begin(), m.grad_b.end(), 0.f);
  }
}

std::vector<float> AllGrads(const LoraAdapter& a) {
  std::vector<float> g;
  for (const LoraModule& m : a.modules()) {
    g.insert(g.end(), m.grad_a.begin(), m.grad_a.end());
    g.insert(g.end(), m.grad_b.begin(), m.grad_b.end());
  }
  return g;
}

class TrainingPresets : public ::testing::TestWithParam<std::string> {};

// Every variant: the KV-shared layers' source K/V and their gradients survive the remat
// recompute, the MoE routing is recomputed to the same choices.
TEST_P(TrainingPresets, PackedRowsEqualSeparateRowsAndRematChangesNothing) {
  Fixture f = ToyModel(GetParam(), DType::kBF16);
  ThreadPool pool(2);
  auto w = LoadWeights(f.dir, f.config);
  ASSERT_TRUE(w.ok());
  LoraAdapter adapter = MakeAdapter(f, w->prefix, 6, /*dropout=*/0.1);
  auto tm = MakeModel(f, &adapter, &pool);
  const auto t1 = RandomTokens(30, 1, f.config.vocab_size), t2 = RandomTokens(19, 2, f.config.vocab_size);
  std::vector<uint8_t> m1(t1.size(), 1), m2(t2.size(), 1);
  TrainRowView rows[2] = {{t1, m1}, {t2, m2}};
  MicroBatchStats packed;
  ASSERT_TRUE(tm->ForwardBackward(rows, 0.02f, 0, &packed).ok());
  const std::vector<float> g_packed = AllGrads(adapter);

  // Separately, without dropout differences: packing changes the element indices the mask is
  // drawn at, so compare without dropout.
  LoraAdapter plain = MakeAdapter(f, w->prefix, 6);
  auto tp = MakeModel(f, &plain, &pool);
  MicroBatchStats a, b;
  ASSERT_TRUE(tp->ForwardBackward(rows, 0.02f, 0, &a).ok());
  const std::vector<float> g_plain_packed = AllGrads(plain);
  ZeroGrads(plain);
  ASSERT_TRUE(tp->ForwardBackward({&rows[0], 1}, 0.02f, 0, &b).ok());
  ASSERT_TRUE(tp->ForwardBackward({&rows[1], 1}, 0.02f, 0, &b).ok());
  const std::vector<float> g_sep = AllGrads(plain);
  EXPECT_NEAR(a.loss_sum, b.loss_sum, 1e-3 * std::abs(a.loss_sum));
  EXPECT_EQ(a.targets, b.targets);
  double max_rel = 0, scale = 0;
  for (float x : g_sep) scale = std::max(scale, double(std::abs(x)));
  for (size_t i = 0; i < g_sep.size(); ++i) max_rel = std::max(max_rel, std::abs(double(g_sep[i] - g_plain_packed[i])) / scale);
  EXPECT_LT(max_rel, 1e-4);

  // Remat recomputes the same forward pass with the same dropout masks: identical gradients.
  LoraAdapter again = MakeAdapter(f, w->prefix, 6, 0.1);
  auto tr = MakeModel(f, &again, &pool, /*remat=*/true);
  MicroBatchStats rs;
  ASSERT_TRUE(tr->ForwardBackward(rows, 0.02f, 0, &rs).ok());
  EXPECT_EQ(rs.loss_sum, packed.loss_sum);
  EXPECT_EQ(AllGrads(again), g_packed);
  EXPECT_LT(tr->activation_bytes(), tm->activation_bytes());
}

INSTANTIATE_TEST_SUITE_P(Variants, TrainingPresets, ::testing::Values("tiny", "tiny-e2b", "tiny-moe"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n) if (ch == '-') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace gk
