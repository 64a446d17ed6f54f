#include "tools/bench/train_bench.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "kernels/isa.h"
#include "kernels/matmul.h"
#include "model/toy_models_test_util.h"
#include "model/weights.h"

namespace gk {
namespace {

// Brute force: the (query, key) pairs a causal (windowed) attention row of T tokens needs.
int64_t CountPairs(int64_t T, bool full, int64_t W) {
  int64_t n = 0;
  for (int64_t i = 0; i < T; ++i) {
    for (int64_t j = 0; j <= i; ++j) n += (full || i - j < W) ? 1 : 0;
  }
  return n;
}

TEST(TrainBench, AttentionPairsAndBlockEntries) {
  for (int64_t T : {1, 5, 63, 64, 65, 70, 200}) {
    for (int64_t W : {1, 5, 64, 100, 512}) {
      EXPECT_EQ(VisiblePairs(T, false, W), CountPairs(T, false, W)) << T << " " << W;
      EXPECT_EQ(VisiblePairs(T, true, W), CountPairs(T, true, W)) << T << " " << W;
      // The blocks compute at least the visible pairs.
      EXPECT_GE(AttentionBlockEntries(T, false, W), VisiblePairs(T, false, W));
      EXPECT_GE(AttentionBlockEntries(T, true, W), VisiblePairs(T, true, W));
    }
  }
  // 70 tokens: blocks [0, 64) and [64, 70). Full: 64 × 64 + 6 × 70. Window 5: the second block
  // starts its keys at 64 − 5 + 1 = 60, so 6 × 10.
  EXPECT_EQ(AttentionBlockEntries(70, true, 5), 64 * 64 + 6 * 70);
  EXPECT_EQ(AttentionBlockEntries(70, false, 5), 64 * 64 + 6 * 10);
  EXPECT_EQ(VisiblePairs(70, false, 5), 15 + 65 * 5);
}

TEST(TrainBench, TargetNames) {
  auto n = LoraTargetNames({"q", "gate_proj", "q", "down"});
  ASSERT_TRUE(n.ok()) << n.message();
  EXPECT_EQ(*n, (std::vector<std::string>{"q_proj", "gate_proj", "down_proj"}));
  EXPECT_FALSE(LoraTargetNames({"q", "lm_head"}).ok());
  EXPECT_FALSE(LoraTargetNames({}).ok());
}

// Frozen layer parameters from the loaded matrices themselves (not from the config).
double LayerMatrixParams(const ModelWeights& w) {
  double n = 0;
  for (const auto& l : w.layers) {
    for (const MatrixView* m : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) {
      if (!m->empty()) n += double(m->rows) * double(m->cols);
    }
  }
  return n;
}

TEST(TrainBench, FlopFormulaOnToyModels) {
  for (const char* preset : {"gemma3-270m", "tiny"}) {
    const ModelConfig c = ToyConfig(preset, 5);
    const std::string dir = WriteToyModel(c, std::string("gk_train_bench_flops_") + preset, DType::kF32, 3);
    auto w = LoadWeights(dir, c);
    ASSERT_TRUE(w.ok()) << w.message();
    LoraOptions lo;
    lo.rank = 4;
    lo.alpha = 8;
    auto a = LoraAdapter::Create(c, w->prefix, lo);
    ASSERT_TRUE(a.ok()) << a.message();
    double lora = 0;
    for (const LoraModule& m : a->modules()) lora += double(4 * m.in + m.out * 4);
    const int64_t T = 70;
    double nh_pairs = 0, nh_entries = 0;
    for (int l = 0; l < c.num_layers; ++l) {
      const double nh = double(c.num_heads) * c.HeadDim(l);
      nh_pairs += nh * double(CountPairs(T, c.IsFull(l), c.sliding_window));
      nh_entries += nh * double(AttentionBlockEntries(T, c.IsFull(l), c.sliding_window));
    }
    const double P = LayerMatrixParams(*w), head = double(c.vocab_size) * c.hidden_size;
    for (bool remat : {false, true}) {
      SCOPED_TRACE(std::string(preset) + (remat ? " remat" : ""));
      const TrainFlops f = CountTrainFlops(c, &*a, T, remat);
      EXPECT_EQ(f.tokens, T);
      EXPECT_EQ(f.loss_rows, T - 1);
      EXPECT_DOUBLE_EQ(f.frozen_layer_params, P);
      EXPECT_DOUBLE_EQ(f.head_params, head);
      EXPECT_DOUBLE_EQ(f.lora_params, lora);
      EXPECT_DOUBLE_EQ(f.attention_nh_pairs, nh_pairs);
      EXPECT_DOUBLE_EQ(f.attention_nh_entries, nh_entries);
      // useful: 4·params·tokens + 6·Pl·T + (1 + 2.5)·4·N·H·pairs
      EXPECT_DOUBLE_EQ(f.useful, 4 * (P + head) * T + 6 * lora * T + 14 * nh_pairs);
      // executed: layers (4 | 6)·P·T, head 2 × 2·V·D·(T − 1) (one pass), LoRA (6 | 8)·Pl·T,
      // attention (4 [+4] + 10)·N·H·entries
      EXPECT_DOUBLE_EQ(f.executed, (remat ? 6 : 4) * P * T + 4 * head * (T - 1) + (remat ? 8 : 6) * lora * T +
                                       (remat ? 18 : 14) * nh_entries);
      EXPECT_GT(f.executed, f.useful);
    }
  }
  // The Gemma 3 toy by hand: D 64, F 128, 4 heads of 32, 1 KV head, 6 layers (5 sliding, window
  // 5), vocabulary 300.
  const ModelConfig c = ToyConfig("gemma3-270m", 5);
  LoraOptions lo;
  lo.rank = 4;
  auto a = LoraAdapter::Create(c, "model.", lo);
  ASSERT_TRUE(a.ok());
  const TrainFlops f = CountTrainFlops(c, &*a, 70, false);
  EXPECT_DOUBLE_EQ(f.frozen_layer_params, 6 * (64 * 128 + 2 * 64 * 32 + 128 * 64 + 3 * 64 * 128));
  EXPECT_DOUBLE_EQ(f.lora_params, 6 * (5 * (4 * 64 + 128 * 4) + 2 * (4 * 64 + 32 * 4)));
  EXPECT_DOUBLE_EQ(f.attention_nh_pairs, 128 * (5 * 340 + 70 * 71 / 2));
}

TEST(TrainBench, RunsOnAToyModelAndReportsTheFields) {
  const ModelConfig c = ToyConfig("gemma3-270m", 5);
  const std::string dir = WriteToyModel(c, "gk_train_bench_run", DType::kBF16, 5);
  TrainBenchOptions o;
  o.model_dir = dir;
  o.seq_len = 40;
  o.rank = 4;
  o.alpha = 8;
  o.steps = 2;
  o.threads = 2;
  o.compare_remat = true;
  o.targets = {"q", "v"};
  o.peak_repeats = 1;
  auto r = RunTrainBench(o);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->seq_len, 40);
  EXPECT_EQ(r->threads, 2);
  EXPECT_EQ(r->arch, "gemma3");
  EXPECT_EQ(r->weight_dtype, "BF16");
  EXPECT_EQ(r->lora_modules, 2 * c.num_layers);
  EXPECT_EQ(r->targets, (std::vector<std::string>{"q_proj", "v_proj"}));
  ASSERT_EQ(r->runs.size(), 2u);
  // Probes: one before, one before each of the 2 × (1 + 2) steps, one after.
  ASSERT_EQ(r->fp32_peak_probes.size(), 8u);
  EXPECT_DOUBLE_EQ(r->fp32_peak_gflops, *std::max_element(r->fp32_peak_probes.begin(), r->fp32_peak_probes.end()));
  EXPECT_TRUE(r->runs[0].remat);
  EXPECT_FALSE(r->runs[1].remat);
  for (const TrainBenchRun& run : r->runs) {
    ASSERT_EQ(run.step_seconds.size(), 2u);
    EXPECT_GT(run.mean_step_s, 0);
    EXPECT_LE(run.min_step_s, run.median_step_s);
    EXPECT_NEAR(run.tokens_per_s, 40 / run.mean_step_s, 1e-6 * run.tokens_per_s);
    EXPECT_GT(run.loss, 0);
    EXPECT_GT(run.activation_bytes, 0);
    EXPECT_GT(run.peak_rss_bytes, 0u);
    EXPECT_EQ(run.flops.tokens, 40);
    EXPECT_NEAR(run.useful_gflops, run.flops.useful / run.mean_step_s / 1e9, 1e-9 * run.useful_gflops);
    EXPECT_NEAR(run.executed_gflops, run.flops.executed / run.mean_step_s / 1e9, 1e-9 * run.executed_gflops);
    if (r->fp32_peak_gflops > 0) {
      EXPECT_NEAR(run.useful_ratio, run.useful_gflops / r->fp32_peak_gflops, 1e-12);
      EXPECT_NEAR(run.executed_ratio, run.executed_gflops / r->fp32_peak_gflops, 1e-12);
    }
    if (r->bf16_peak_gflops > 0) {
      EXPECT_NEAR(run.useful_ratio_bf16, run.useful_gflops / r->bf16_peak_gflops, 1e-12);
    }
    // The passes are parts of the step, each measured.
    EXPECT_GT(run.forward_s, 0);
    EXPECT_GT(run.loss_head_s, 0);
    EXPECT_GT(run.backward_s, 0);
    EXPECT_LE(run.forward_s + run.loss_head_s + run.backward_s, run.mean_step_s * (1 + 1e-9));
  }
  // The default precision: bf16 products against these bf16 weights.
  EXPECT_EQ(r->precision, "bf16");
  EXPECT_EQ(r->bf16_route, CpuHasAvx512Bf16() && ActiveIsa() == Isa::kAvx512 ? "oneDNN" : "emulated");
  // Same tokens, same adapter: the loss does not depend on remat.
  EXPECT_NEAR(r->runs[0].loss, r->runs[1].loss, 1e-5);
  // remat keeps one layer's activations (plus every layer's input) instead of all of them.
  EXPECT_LT(r->runs[0].activation_bytes, r->runs[1].activation_bytes);
  EXPECT_GT(r->runs[0].flops.executed, r->runs[1].flops.executed);
  EXPECT_DOUBLE_EQ(r->runs[0].flops.useful, r->runs[1].flops.useful);

  const nlohmann::json j = TrainBenchToJson(*r);
  for (const char* k : {"model", "cpu", "threads", "seq_len", "rank", "alpha", "fp32_gflops", "fp32_gflops_probes",
                        "runs", "remat_saving"}) {
    EXPECT_TRUE(j.contains(k)) << k;
  }
  for (const char* k : {"tokens_per_s", "mean_step_s", "useful_flops", "executed_flops", "useful_ratio_fp32",
                        "executed_ratio_fp32", "activation_bytes", "peak_rss_bytes", "flops"}) {
    EXPECT_TRUE(j["runs"][0].contains(k)) << k;
  }
  EXPECT_EQ(j["remat_saving"]["saved_bytes"].get<int64_t>(),
            r->runs[1].activation_bytes - r->runs[0].activation_bytes);
  const std::string text = FormatTrainBench(*r);
  for (const char* s : {"tokens/s", "useful", "executed", "fp32 FMA peak", "[remat on]", "[remat off]", "remat    "}) {
    EXPECT_NE(text.find(s), std::string::npos) << s << "\n" << text;
  }

  // f32: the same step in f32 products, the same loss to bf16's accuracy on this toy.
  TrainBenchOptions f = o;
  f.precision = "f32";
  f.compare_remat = false;
  auto r32 = RunTrainBench(f);
  ASSERT_TRUE(r32.ok()) << r32.message();
  EXPECT_EQ(r32->precision, "f32");
  EXPECT_EQ(r32->bf16_route, "");
  EXPECT_NE(r32->runs[0].loss, r->runs[1].loss);
  EXPECT_NEAR(r32->runs[0].loss, r->runs[1].loss, 1e-2 * r32->runs[0].loss);
  EXPECT_NE(FormatTrainBench(*r32).find("products f32"), std::string::npos);
  f.precision = "f16";
  EXPECT_FALSE(RunTrainBench(f).ok());

  o.targets = {"nope"};
  EXPECT_FALSE(RunTrainBench(o).ok());
}

}  // namespace
}  // namespace gk
