// The planner on Gemma 4 31B against hand computations from ../shared/spec/gemma4.md §1.7
// (D 5376, F 21504, 60 layers = 50 sliding + 10 full, N 32, sliding K 16 × H 256, full K=V
// layers K 4 × H 512, V 262144), and the reference case's mesh facts (FACTS.md §1.4).
#include <gtest/gtest.h>

#include "model/presets.h"
#include "model/train/training_memory.h"
#include "tools/cost/hardware_catalog.h"
#include "tools/plan/memory_plan.h"
#include "tools/plan/roofline.h"
#include "tools/plan/sharding.h"

namespace gk::plan {
namespace {

ModelConfig C31b() { return *PresetConfig("31b"); }

TEST(Plan31b, ParameterCountByHand) {
  const int64_t embedding = 262144LL * 5376;                              // 1,409,286,144
  const int64_t sliding = 2LL * 32 * 256 * 5376 + 2LL * 16 * 256 * 5376   // q, o; k, v
                          + 3LL * 5376 * 21504 + 4 * 5376 + 2 * 256 + 1;  // MLP; norms, layer scalar
  const int64_t full = 2LL * 32 * 512 * 5376 + 1LL * 4 * 512 * 5376       // q, o; k only (K=V)
                       + 3LL * 5376 * 21504 + 4 * 5376 + 2 * 512 + 1;
  EXPECT_EQ(sliding, 478959105);  // spec: 478.96 M
  EXPECT_EQ(full, 534009857);     // spec: 534.01 M
  const int64_t total = embedding + 5376 + 50 * sliding + 10 * full;
  EXPECT_EQ(total, 30697345340);
  auto base = BaseTensors(C31b());
  EXPECT_EQ(TotalElements(base), total);
  EXPECT_EQ(C31b().ParameterCount(), total);
  char buf[16];
  std::snprintf(buf, sizeof buf, "%.3g", double(total) / 1e9);
  EXPECT_STREQ(buf, "30.7");
}

TEST(Plan31b, KvBytesPerTokenPerLayerType) {
  const ModelConfig c = C31b();
  // sliding: K and V, 16 heads × 256, bf16 = 16 KiB; full: K and V (V is the raw K projection,
  // stored apart), 4 heads × 512 = 8 KiB.
  EXPECT_EQ(KvBytesPerTokenLayer(c, 0, 1, 2), 2 * 16 * 256 * 2);
  EXPECT_EQ(KvBytesPerTokenLayer(c, 5, 1, 2), 2 * 4 * 512 * 2);
  EXPECT_EQ(KvBytesPerTokenLayer(c, 5, 1, 1), 2 * 4 * 512);  // fp8
  // One 4096-token sequence: 50 sliding layers hold 1024 positions, 10 full layers all 4096
  // (spec: ~1.09 GiB).
  EXPECT_EQ(KvBytesPerSequence(c, 4096, 1, 2), 50LL * 1024 * 16384 + 10LL * 4096 * 8192);
  // tp=8: sliding 16/8 = 2 heads per device; full 4 < 8 heads are replicated (1 per device).
  EXPECT_EQ(KvBytesPerTokenLayer(c, 0, 8, 2), 2 * 2 * 256 * 2);
  EXPECT_EQ(KvBytesPerTokenLayer(c, 5, 8, 2), 2 * 1 * 512 * 2);
}

TEST(Plan31b, Tp8RefusedForTrainingTp4Accepted) {
  auto base = BaseTensors(C31b());
  Status s = CheckBaseSharding(base, {1, 8});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("tp=8 does not divide num_global_key_value_heads=4"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("k_einsum"), std::string::npos) << s.message();
  EXPECT_TRUE(CheckBaseSharding(base, {1, 4}).ok());
  EXPECT_TRUE(CheckBaseSharding(base, {2, 1}).ok());
  // Serving (vLLM) replicates the 4 global kv heads over tp=8 instead.
  EXPECT_TRUE(CheckServeTp(C31b(), 8).ok());
  EXPECT_FALSE(CheckServeTp(C31b(), 3).ok());
}

TEST(Plan31b, LoraSpecsFilteredAsTheReferenceCase) {
  auto lora = LoraTensors(C31b(), 64);
  FilterInheritedSpecs(lora, {1, 4});
  // The reference case's TPU target set at r=64: 467.8 M (spec §3.3).
  EXPECT_EQ(TotalElements(lora), 467763200);
  for (const TensorGroup& t : lora) {
    if (t.name == "layers.<sliding>.attn.q_einsum.w_lora_a") {
      EXPECT_EQ(SpecText(t.spec), "(tp, fsdp, None)");  // inherited, rank 3 on a rank-2 tensor
      EXPECT_EQ(SpecText(t.effective), "(None, None)");
    }
    if (t.name == "layers.<sliding>.attn.kv_einsum.w_lora_b") {  // (64, 2, 16, 256): 2 % 4 != 0
      EXPECT_EQ(SpecText(t.effective), "(None, None, fsdp, None)");
    }
  }
}

TEST(Plan31b, TrainingMemoryByHand) {
  const ModelConfig c = C31b();
  auto base = BaseTensors(c);
  ASSERT_TRUE(CheckBaseSharding(base, {1, 4}).ok());
  TrainPlanOptions o;
  o.seq_len = 3072;
  o.lora_rank = 64;
  o.remat = true;
  const TrainMemory m = TrainingMemory(c, base, {1, 4}, o);
  // Every weight splits over tp=4 but the 60 layer scalars (1,).
  EXPECT_DOUBLE_EQ(m.lines[0].bytes, 2.0 * ((30697345340 - 60) / 4 + 60));
  // LoRA per device (tp=4, filtered specs), per sliding layer: q A 5376·64 (replicated),
  // q B 64·32·256/4, kv A 5376·64, kv B 64·2·16·256, o A 32/4·256·64, o B 64·5376,
  // gate/up A 5376·64/4 and B 64·21504/4, down A 21504/4·64, down B 64/4·5376.
  const int64_t sliding = 344064 + 131072 + 344064 + 524288 + 131072 + 344064 + 2 * (86016 + 344064) + 344064 + 86016;
  const int64_t full = 344064 + 262144 + 262144 + 344064 + 2 * (86016 + 344064) + 344064 + 86016;
  const double lora_dev = double(50 * sliding + 10 * full);
  EXPECT_EQ(sliding, 3108864);
  EXPECT_DOUBLE_EQ(m.lines[1].bytes, 2 * lora_dev);  // bf16 factors
  EXPECT_DOUBLE_EQ(m.lines[2].bytes, 2 * lora_dev);  // bf16 gradients
  EXPECT_DOUBLE_EQ(m.lines[3].bytes, 8 * lora_dev);  // AdamW m + v in f32
  // Remat activations: 61 layer inputs of (3072, 5376) + one layer's tensors, bf16, / tp.
  const double T = 3072, D = 5376, F = 21504, NH = 32 * 512, KH = 16 * 512;
  const double layer = T * D + 2 * (T * NH + 2 * T * KH) + T * NH + 32 * T + 4 * T * D + 3 * T * F + 7 * T * 64;
  EXPECT_DOUBLE_EQ(m.activations_remat, 2 * (61 * T * D + layer) / 4);
  EXPECT_LT(m.total, 95.0 * 1073741824.0);  // fits a v5p chip
}

TEST(PlanMesh, ParsesAndRefuses) {
  auto m = ParseMesh("fsdp=2,tp=4");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->fsdp, 2);
  EXPECT_EQ(m->tp, 4);
  EXPECT_EQ(ParseMesh("tp=4")->fsdp, 1);
  for (const char* bad : {"", "fsdp=0,tp=4", "fsdp=1.5,tp=2", "tp=-2", "dp=2", "tp=4,tp=2", "fsdp", "tp=x"}) {
    EXPECT_FALSE(ParseMesh(bad).ok()) << bad;
  }
}

TEST(PlanRoofline, FlopCountsByHand) {
  const ModelConfig c = C31b();
  // Matmul params = all params − norms/scalars − nothing (the tied lm_head counts once, as
  // the logits matmul; the embedding lookup is free).
  const double norms = 5376 + 50 * (4 * 5376 + 2 * 256 + 1) + 10 * (4 * 5376 + 2 * 512 + 1);
  EXPECT_DOUBLE_EQ(MatmulParams(c), 30697345340.0 - norms);
  // Attention at seq 1: one key per layer: Σ 4 · 32 · H.
  EXPECT_DOUBLE_EQ(AttentionFlopsPerToken(c, 1), 4.0 * 32 * (50 * 256 + 10 * 512));
  auto cat = cost::HardwareCatalog::Default();
  ASSERT_TRUE(cat.ok());
  auto hw = cat->Find("tpu-v5p-8");
  ASSERT_TRUE(hw.ok());
  const TrainProjection p = ProjectTraining(c, *hw, {1, 4}, 3072, 1, 64, true);
  EXPECT_NEAR(p.t_compute, p.flops_per_token * 3072 / (4 * 459e12), 1e-12);
  EXPECT_GT(p.tokens_per_s, 763);  // a roofline is an upper bound on the measured rate
}

// E2B, E4B and 26B-A4B (spec §1.6-1.7) by hand: V 262144, bf16.
// E2B: D 1536, 35 layers (4 sliding : 1 full, full at 4, 9, ..., 34), N 8, K 1, H 256 / 512, F 6144
// (12288 in the 20 KV-shared layers 15-34), P 256. E4B: D 2560, 42 layers (5 : 1), K 2, F 10240,
// 18 KV-shared. 26B-A4B: D 2816, 30 layers (5 : 1), N 16, sliding K 8, full K=V K 2, dense F 2112,
// 128 experts of 704, top 8.
TEST(PlanVariants, ParameterCountsByHand) {
  const int64_t V = 262144;
  {  // E2B: the PLE table (V × 35·256) is half the model; without it, the "2.3 B effective".
    const int64_t D = 1536, P = 256, ple_layer = 2 * D * P + D, norms_s = 4 * D + 2 * 256 + 1, norms_f = 4 * D + 2 * 512 + 1;
    const int64_t sliding = 2 * 8 * 256 * D + 2 * 256 * D + 3 * D * 6144 + norms_s + ple_layer;
    const int64_t sliding_wide = 2 * 8 * 256 * D + 2 * 256 * D + 3 * D * 12288 + norms_s + ple_layer;
    const int64_t full = 2 * 8 * 512 * D + 2 * 512 * D + 3 * D * 6144 + norms_f + ple_layer;
    const int64_t full_wide = 2 * 8 * 512 * D + 2 * 512 * D + 3 * D * 12288 + norms_f + ple_layer;
    const int64_t table = V * 35 * P;
    const int64_t total = V * D + D + table + 35 * P * D + P + 12 * sliding + 16 * sliding_wide + 3 * full + 4 * full_wide;
    EXPECT_EQ(total, 4647449891);
    const ModelConfig c = *PresetConfig("e2b");
    EXPECT_EQ(c.ParameterCount(), total);
    EXPECT_EQ(TotalElements(BaseTensors(c)), total);
    EXPECT_NEAR(double(total - table) / 1e9, 2.30, 0.005);
    // Full fine-tuning trains all but the 35 layer scalars and the unused k/v/k_norm of the
    // 20 KV-shared layers (16 sliding, 4 full).
    EXPECT_EQ(FullFineTuneParameters(c), total - 35 - 16 * (2 * 256 * D + 256) - 4 * (2 * 512 * D + 512));
  }
  {  // E4B
    const int64_t D = 2560, P = 256, ple_layer = 2 * D * P + D;
    const int64_t sliding = 2 * 8 * 256 * D + 2 * 2 * 256 * D + 3 * D * 10240 + 4 * D + 2 * 256 + 1 + ple_layer;
    const int64_t full = 2 * 8 * 512 * D + 2 * 2 * 512 * D + 3 * D * 10240 + 4 * D + 2 * 512 + 1 + ple_layer;
    EXPECT_EQ(sliding, 93074433);
    EXPECT_EQ(full, 106182145);
    const int64_t total = V * D + D + V * 42 * P + 42 * P * D + P + 35 * sliding + 7 * full;
    EXPECT_EQ(total, 7518069034);
    const ModelConfig c = *PresetConfig("e4b");
    EXPECT_EQ(c.ParameterCount(), total);
    EXPECT_EQ(TotalElements(BaseTensors(c)), total);
  }
  {  // 26B-A4B: 25.2 B in all, 3.8 B active (the dense parts and 8 of 128 experts per token).
    const int64_t D = 2816, E = 128, Fe = 704;
    const int64_t sliding = 2 * 16 * 256 * D + 2 * 8 * 256 * D + 3 * D * 2112 + 4 * D + 2 * 256 + 1;
    const int64_t full = 2 * 16 * 512 * D + 2 * 512 * D + 3 * D * 2112 + 4 * D + 2 * 512 + 1;
    const int64_t experts = E * 3 * D * Fe;
    const int64_t moe = E * D + D + E + experts + 3 * D;  // router, scales, experts, 3 norms
    const int64_t total = V * D + D + 25 * (sliding + moe) + 5 * (full + moe);
    EXPECT_EQ(total, 25233141790);
    const ModelConfig c = *PresetConfig("26b-a4b");
    EXPECT_EQ(c.ParameterCount(), total);
    EXPECT_EQ(TotalElements(BaseTensors(c)), total);
    EXPECT_DOUBLE_EQ(ExpertParamsPerLayer(c), double(experts));
    const double active = double(total) - 30.0 * double(experts) * (1.0 - 8.0 / 128);
    EXPECT_NEAR(active / 1e9, 3.82, 0.005);
    // Matmul parameters a token goes through: all but the norms/scales and 120 of 128 experts.
    const double norms = D + 25.0 * (4 * D + 2 * 256 + 1) + 5.0 * (4 * D + 2 * 512 + 1) + 30.0 * (D + E + 3 * D);
    EXPECT_DOUBLE_EQ(MatmulParams(c), active - norms);
    EXPECT_DOUBLE_EQ(StoredMatmulParams(c), double(total) - norms);
  }
}

TEST(PlanVariants, KvCacheShardingAndMemory) {
  const ModelConfig e2b = *PresetConfig("e2b");
  // E2B caches only its 15 own-KV layers: 12 sliding (1 head × 256, at most 512 positions) and 3 full (1 × 512).
  EXPECT_EQ(KvBytesPerSequence(e2b, 4096, 1, 2), 12LL * 512 * (2 * 256 * 2) + 3LL * 4096 * (2 * 512 * 2));
  const ModelConfig moe = *PresetConfig("26b-a4b");
  EXPECT_EQ(KvBytesPerSequence(moe, 4096, 1, 2), 25LL * 1024 * (2 * 8 * 256 * 2) + 5LL * 4096 * (2 * 2 * 512 * 2));
  // Tunix shards the experts over fsdp (128) and their hidden/intermediate axes over tp;
  // 2 global kv heads refuse tp=4 as the 31B's 4 refuse tp=8.
  auto base = BaseTensors(moe);
  EXPECT_TRUE(CheckBaseSharding(base, {8, 2}).ok());
  Status s = CheckBaseSharding(base, {1, 4});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("num_global_key_value_heads=2"), std::string::npos) << s.message();
  auto base2 = BaseTensors(moe);
  s = CheckBaseSharding(base2, {11, 1});  // 11 divides hidden_size 2816 but not the 128 experts
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("num_experts=128"), std::string::npos) << s.message();
  // E2B's PLE table shards over tp on the vocabulary and fsdp on the 35·256 columns; its one
  // kv head refuses any tp > 1.
  auto pe = BaseTensors(e2b);
  ASSERT_TRUE(CheckBaseSharding(pe, {8, 1}).ok());
  for (const TensorGroup& t : pe) {
    if (t.name == "embedder.per_layer_input_embedding") {
      EXPECT_EQ(t.ElementsPerDevice({8, 1}), 262144LL * 8960 / 8);
    }
  }
  auto pe2 = BaseTensors(e2b);
  EXPECT_FALSE(CheckBaseSharding(pe2, {1, 2}).ok());
  // Full fine-tuning: bf16 weights + f32 masters, gradients and moments = 18 B per parameter.
  TrainPlanOptions o;
  o.lora_rank = 0;
  o.remat = true;
  auto b1 = BaseTensors(e2b);
  ASSERT_TRUE(CheckBaseSharding(b1, {1, 1}).ok());
  const TrainMemory m = TrainingMemory(e2b, b1, {1, 1}, o);
  const double p = double(e2b.ParameterCount());
  EXPECT_DOUBLE_EQ(m.lines[0].bytes + m.lines[1].bytes + m.lines[2].bytes + m.lines[3].bytes, 18 * p);
  // Serving reads no PLE table and, at batch 1, 8 of 128 experts per decode step.
  auto cat = cost::HardwareCatalog::Default();
  ASSERT_TRUE(cat.ok());
  auto hw = cat->Find("h200");
  ASSERT_TRUE(hw.ok());
  const ServeProjection one = ProjectServing(moe, *hw, 1, 1024, 1024, 1, 2);
  const double dense = ServingWeightBytesPerDevice(moe, 1) - 2.0 * 30 * ExpertParamsPerLayer(moe) * (1 - 8.0 / 128);
  EXPECT_NEAR(one.tpot_weights_s, dense / hw->chip.BandwidthBytesPerS(), 1e-9);
}

}  // namespace
}  // namespace gk::plan
