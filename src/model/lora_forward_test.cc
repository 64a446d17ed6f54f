// Serving through LoRA adapters (ForwardPaged with per-item LoraWeights) against the models
// `gemmakit merge` makes from the same adapters (MergeLora, checked against transformers and
// PEFT's merge_and_unload): a batch mixing two adapters and the base gives each item the
// logits of its merged model, and a Qwix item converted from the PEFT adapter gives the same.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include "model/gemma_model.h"
#include "model/lora_source.h"
#include "model/lora_weights.h"
#include "model/paged_kv.h"
#include "model/toy_models_test_util.h"
#include "model/train/lora_test_util.h"
#include "model/weights.h"
#include "tools/bridge/convert.h"
#include "tools/bridge/merge.h"

namespace gk {
namespace {

namespace fs = std::filesystem;

constexpr int kBlock = 4;

// A rank-`rank` adapter on every projection with random A and B (B nonzero, unlike PEFT's
// init). v_proj's A is k_proj's and up_proj's is gate_proj's: Qwix's fused kv_einsum and
// gating_einsum share one A, so the adapter also has a Qwix form.
LoraAdapter RandomAdapter(const ModelConfig& c, const std::string& prefix, int rank, uint64_t seed) {
  LoraOptions o;
  o.rank = rank;
  o.alpha = 2.0 * rank;
  LoraAdapter a = RandomLoraAdapter(c, prefix, o, seed, 0.2f);
  for (LoraModule& m : a.modules()) {
    const LoraTarget shares = m.target == LoraTarget::kV ? LoraTarget::kK : m.target == LoraTarget::kUp ? LoraTarget::kGate : m.target;
    if (shares != m.target) m.a = a.Find(m.layer, shares)->a;
  }
  return a;
}

// A toy base model on disk with its tensor prefix, and a scratch directory for adapters; both
// removed at the end.
struct ToyBase {
  ModelConfig config;
  std::string base, work, prefix;
  ToyBase(const std::string& preset, const std::string& name, DType dtype, uint64_t seed)
      : config(ToyConfig(preset, 6)) {
    base = WriteToyModel(config, "gk_lora_" + name + "_base", dtype, seed);
    auto w = LoadWeights(base, config);
    EXPECT_TRUE(w.ok()) << w.message();
    if (w.ok()) prefix = w->prefix;
    work = TestTempDir("gk_lora_" + name + "_work");
    fs::remove_all(work);
  }
  ~ToyBase() {
    fs::remove_all(work);
    fs::remove_all(base);
  }
};

std::unique_ptr<GemmaModel> Load(const std::string& dir, ThreadPool* threads) {
  auto m = GemmaModel::Load(dir, threads);
  EXPECT_TRUE(m.ok()) << m.message();
  return m.ok() ? std::move(*m) : nullptr;
}

// Sequences run side by side: a prompt, then greedy decoding, each item its own model or adapter.
struct Decoded {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<float>> prompt_logits;  // per sequence, every prompt token's row
};

// All sequences in one batch per step through `model` (items' adapters as given), or each on
// its own model when models[i] is set (then adapters are ignored).
Decoded Decode(std::vector<GemmaModel*> models, const std::vector<const LoraWeights*>& adapters,
           const std::vector<std::vector<int32_t>>& prompts, int steps) {
  const ModelConfig& c = models[0]->config();
  const int64_t V = c.vocab_size;
  const size_t n = prompts.size();
  std::vector<std::unique_ptr<PagedKvPool>> pools;
  PagedKvOptions po;
  po.block_size = kBlock;
  po.dtype = DType::kF32;
  po.num_blocks[0] = po.num_blocks[1] = int64_t(n) * 16;
  for (GemmaModel* m : models) {
    auto p = PagedKvPool::Create(m->config(), po);
    EXPECT_TRUE(p.ok()) << p.message();
    pools.push_back(std::move(*p));
  }
  std::vector<std::vector<int32_t>> tables(n);
  std::vector<PagedSequence> seqs(n);
  for (size_t i = 0; i < n; ++i) {
    for (int b = 0; b < 16; ++b) tables[i].push_back(int32_t(i * 16 + size_t(b)));
    seqs[i].blocks[0] = seqs[i].blocks[1] = tables[i];
  }
  Decoded run;
  run.tokens = prompts;
  run.prompt_logits.resize(n);
  for (int step = 0; step <= steps; ++step) {
    // One pass per model: with a single model, every sequence in one batch.
    for (size_t mi = 0; mi < models.size(); ++mi) {
      std::vector<PagedBatchItem> items;
      std::vector<size_t> which;
      for (size_t i = 0; i < n; ++i) {
        if (models.size() > 1 && i != mi) continue;
        const std::vector<int32_t>& t = run.tokens[i];
        const size_t first = step == 0 ? 0 : t.size() - 1;
        items.push_back({std::span<const int32_t>(t).subspan(first), &seqs[i], step == 0 ? LogitsMode::kAll : LogitsMode::kLast,
                         models.size() > 1 ? nullptr : adapters[i]});
        which.push_back(i);
      }
      int64_t rows = 0;
      for (const PagedBatchItem& it : items) rows += it.logits == LogitsMode::kAll ? int64_t(it.tokens.size()) : 1;
      std::vector<float> logits(size_t(rows * V));
      const Status st = models[mi]->ForwardPaged(items, *pools[mi], logits.data());
      EXPECT_TRUE(st.ok()) << st.message();
      int64_t row = 0;
      for (size_t k = 0; k < items.size(); ++k) {
        const size_t i = which[k];
        const int64_t r = items[k].logits == LogitsMode::kAll ? int64_t(items[k].tokens.size()) : 1;
        if (step == 0) run.prompt_logits[i].assign(logits.begin() + row * V, logits.begin() + (row + r) * V);
        const float* last = logits.data() + (row + r - 1) * V;
        seqs[i].num_tokens += int64_t(items[k].tokens.size());
        run.tokens[i].push_back(int32_t(std::max_element(last, last + V) - last));
        row += r;
      }
    }
  }
  return run;
}

double RelErr(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, double(std::fabs(a[i] - b[i])));
    den = std::max(den, double(std::fabs(b[i])));
  }
  return num / den;
}

class LoraForward : public ::testing::TestWithParam<std::string> {};

TEST_P(LoraForward, MixedBatchMatchesMergedModels) {
  const std::string preset = GetParam();
  ToyBase t(preset, "fwd_" + preset, DType::kF32, 11);
  const ModelConfig& c = t.config;
  const std::string &base = t.base, &work = t.work, &prefix = t.prefix;
  std::vector<std::string> merged;
  std::vector<std::shared_ptr<const LoraWeights>> adapters;
  for (int k = 0; k < 2; ++k) {
    const std::string dir = StrCat(work, "/adapter", k), out = StrCat(work, "/merged", k);
    ASSERT_TRUE(RandomAdapter(c, prefix, 4 + 4 * k, 20 + uint64_t(k)).SavePeft(dir, base).ok());
    auto src = OpenPeftLoraSource(dir);
    ASSERT_TRUE(src.ok()) << src.message();
    const auto merged_report = bridge::MergeLora(base, **src, out);
    ASSERT_TRUE(merged_report.ok()) << merged_report.message();
    merged.push_back(out);
    auto lw = LoadLoraWeights({dir, 0}, base, c, prefix, 0);
    ASSERT_TRUE(lw.ok()) << lw.message();
    adapters.push_back(*lw);
  }
  ThreadPool threads(2);
  auto base_model = Load(base, &threads);
  auto m0 = Load(merged[0], &threads);
  auto m1 = Load(merged[1], &threads);
  ASSERT_TRUE(base_model && m0 && m1);
  // adapter 0, base, adapter 1, adapter 0 again (a second segment of the same adapter).
  const std::vector<std::vector<int32_t>> prompts = {{2, 17, 45, 99, 7, 150, 3}, {2, 5, 8, 13, 21}, {2, 250, 1, 77, 90, 4},
                                                     {2, 61, 62, 63}};
  const std::vector<const LoraWeights*> lora = {adapters[0].get(), nullptr, adapters[1].get(), adapters[0].get()};
  const Decoded mixed = Decode({base_model.get()}, lora, prompts, 10);
  const Decoded alone = Decode({m0.get(), base_model.get(), m1.get(), m0.get()}, {}, prompts, 10);
  for (size_t i = 0; i < prompts.size(); ++i) {
    // The merge rounds W + s·B·A once to f32: ~1e-7 relative per weight.
    EXPECT_LT(RelErr(mixed.prompt_logits[i], alone.prompt_logits[i]), 2e-5) << "sequence " << i;
    EXPECT_EQ(mixed.tokens[i], alone.tokens[i]) << "sequence " << i;
  }
  // The adapters change the output (the test would pass with no LoRA applied otherwise).
  const Decoded plain = Decode({base_model.get()}, {nullptr, nullptr, nullptr, nullptr}, prompts, 0);
  EXPECT_GT(RelErr(plain.prompt_logits[0], alone.prompt_logits[0]), 1e-2);
  EXPECT_EQ(RelErr(plain.prompt_logits[1], mixed.prompt_logits[1]), 0.0) << "the base rows are untouched";

  // The same adapter as a Qwix item (Tunix layout, alpha given at load) serves the same logits.
  const auto converted = bridge::PeftToQwixOrbax(work + "/adapter0", base, work + "/qwix", 5);
  ASSERT_TRUE(converted.ok()) << converted.message();
  auto qwix = LoadLoraWeights({work + "/qwix/5", 8.0}, base, c, prefix, 0);
  ASSERT_TRUE(qwix.ok()) << qwix.message();
  const Decoded q = Decode({base_model.get()}, {qwix->get()}, {prompts[0]}, 10);
  EXPECT_LT(RelErr(q.prompt_logits[0], mixed.prompt_logits[0]), 1e-6);
  EXPECT_EQ(q.tokens[0], mixed.tokens[0]);
}

INSTANTIATE_TEST_SUITE_P(Presets, LoraForward, ::testing::Values("tiny", "tiny-e2b", "tiny-moe", "gemma3-270m"));

// A bf16 model holds its adapters in bf16 (padded to a 16-row panel, packed where the CPU has
// the kernels): the logits stay within bf16 rounding of the f32-held adapter's, and the greedy
// tokens of the tiny model are the same.
TEST(LoraWeights, Bf16StorageMatchesF32WithinRounding) {
  ToyBase t("tiny", "bf16", DType::kBF16, 11);
  const ModelConfig& c = t.config;
  const std::string &base = t.base, &work = t.work, &prefix = t.prefix;
  ASSERT_TRUE(RandomAdapter(c, prefix, 4, 30).SavePeft(work + "/a", base).ok());
  auto f32 = LoadLoraWeights({work + "/a", 0}, base, c, prefix, 0, DType::kF32);
  auto bf16 = LoadLoraWeights({work + "/a", 0}, base, c, prefix, 0, DType::kBF16);
  ASSERT_TRUE(f32.ok() && bf16.ok());
  EXPECT_EQ((*bf16)->Find(0, LoraTarget::kQ)->a.rows, 16);  // rank 4 padded to a panel
  EXPECT_LT((*bf16)->bytes(), 3 * (*f32)->bytes());
  ThreadPool threads(2);
  auto model = Load(base, &threads);
  ASSERT_TRUE(model);
  const std::vector<std::vector<int32_t>> prompts = {{2, 17, 45, 99, 7, 150, 3}, {2, 5, 8}};
  const Decoded a = Decode({model.get()}, {f32->get(), f32->get()}, prompts, 8);
  const Decoded b = Decode({model.get()}, {bf16->get(), bf16->get()}, prompts, 8);
  const Decoded none = Decode({model.get()}, {nullptr, nullptr}, prompts, 0);
  for (size_t i = 0; i < prompts.size(); ++i) {
    const double err = RelErr(b.prompt_logits[i], a.prompt_logits[i]);
    // The random adapter moves these logits by ~90 %; rounding its factors to bf16 moves them by
    // ~1.2 % (the same unpacked: the packing changes nothing).
    EXPECT_LT(err, 3e-2) << i;
    EXPECT_GT(RelErr(none.prompt_logits[i], a.prompt_logits[i]), 20 * err) << "the adapter must matter more";
    EXPECT_EQ(a.tokens[i], b.tokens[i]) << i;
  }
}

TEST(LoraWeights, RefusesAdaptersThatDoNotFit) {
  ToyBase t("tiny", "fit", DType::kF32, 3);
  const ModelConfig& c = t.config;
  const std::string &base = t.base, &work = t.work, &prefix = t.prefix;
  ASSERT_TRUE(RandomAdapter(c, prefix, 8, 1).SavePeft(work + "/r8", base).ok());
  auto one_line = [](const Status& s) { return !s.ok() && s.message().find('\n') == std::string::npos; };
  // Rank above --max-lora-rank.
  auto r = LoadLoraWeights({work + "/r8", 0}, base, c, prefix, 4);
  EXPECT_TRUE(one_line(r.status()));
  EXPECT_NE(r.message().find("rank 8 is above --max-lora-rank 4"), std::string::npos) << r.message();
  // An adapter of another model (wider hidden size).
  ModelConfig wide = c;
  wide.hidden_size *= 2;
  const std::string wide_base = WriteToyModel(wide, "gk_lora_fit_wide", DType::kF32, 3);
  ASSERT_TRUE(RandomAdapter(wide, prefix, 4, 1).SavePeft(work + "/wide", wide_base).ok());
  r = LoadLoraWeights({work + "/wide", 0}, base, c, prefix, 0);
  EXPECT_TRUE(one_line(r.status()));
  EXPECT_NE(r.message().find("has shape"), std::string::npos) << r.message();
  // Missing files, a corrupt safetensors, a path that is no adapter, alpha= on a PEFT adapter.
  r = LoadLoraWeights({work + "/nothing", 0}, base, c, prefix, 0);
  EXPECT_NE(r.message().find("no such adapter directory"), std::string::npos) << r.message();
  fs::create_directories(work + "/empty");
  r = LoadLoraWeights({work + "/empty", 0}, base, c, prefix, 0);
  EXPECT_NE(r.message().find("neither a PEFT adapter"), std::string::npos) << r.message();
  EXPECT_TRUE(one_line(r.status()));
  fs::resize_file(work + "/r8/adapter_model.safetensors", 100);
  r = LoadLoraWeights({work + "/r8", 0}, base, c, prefix, 0);
  EXPECT_TRUE(one_line(r.status())) << r.message();
  r = LoadLoraWeights({work + "/wide", 16}, base, c, prefix, 0);
  EXPECT_NE(r.message().find("alpha= is for Qwix items"), std::string::npos) << r.message();
  fs::remove_all(wide_base);
}

TEST(LoraWeights, ParsesLocations) {
  auto l = ParseLoraLocation("/a/b:alpha=64");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->path, "/a/b");
  EXPECT_EQ(l->alpha, 64.0);
  l = ParseLoraLocation("/a/b");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->alpha, 0.0);
  EXPECT_FALSE(ParseLoraLocation("/a:alpha=x").ok());
  EXPECT_FALSE(ParseLoraLocation("/a:alpha=-1").ok());
  EXPECT_FALSE(ParseLoraLocation(":alpha=2").ok());
}

}  // namespace
}  // namespace gk
