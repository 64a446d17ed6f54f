// The burst ceiling against sums worked by hand from the spec's table (spec/gemma4.md), not from
// the config code: the 31B shape's KV per position, E2B's with its shared layers, and the
// reference case's burst on an H200's limits.
#include "tools/bench/burst_ceiling.h"

#include <gtest/gtest.h>

#include <cstdio>

#include "model/presets.h"

namespace gk {
namespace {

TEST(BurstCeiling, KvBytesPerRowFollowTheLayerTable) {
  // 31B: 50 sliding layers of 16 KV heads × 256, 10 full ones of 4 × 512 (K=V: still K and V).
  const ModelConfig b31 = *PresetConfig("31b");
  const double per_position = 50 * 2 * 16 * 256 * 2 + 10 * 2 * 4 * 512 * 2;  // bf16: 901,120 bytes
  EXPECT_DOUBLE_EQ(KvBytesReadPerRow(b31, 384, 2), 384 * per_position);
  EXPECT_DOUBLE_EQ(KvBytesReadPerRow(b31, 384, 1), 384 * per_position / 2);  // fp8
  // Past the 1,024-token window the sliding layers read 1,024 positions.
  EXPECT_DOUBLE_EQ(KvBytesReadPerRow(b31, 4096, 2), 50 * 2 * 16 * 256 * 2 * 1024.0 + 10 * 2 * 4 * 512 * 2 * 4096.0);
  // E2B: 28 sliding layers (window 512) and 7 full ones, one KV head each; the 20 layers that
  // read another layer's KV read it again.
  const ModelConfig e2b = *PresetConfig("e2b");
  EXPECT_DOUBLE_EQ(KvBytesReadPerRow(e2b, 1000, 2), 28 * 512 * 1024.0 + 7 * 1000 * 2048.0);
}

// The reference case's burst (64 prompts × 128 tokens, 256 out: 255 decode steps after the
// prefill's token) with the 31B shape's bf16 weights on an H200's datasheet-order limits: every
// decode step is bandwidth-bound, so the decode time is a closed sum.
TEST(BurstCeiling, ReferenceBurstOnAnH200) {
  const ModelConfig c = *PresetConfig("31b");
  const double params = double(c.ParameterCount()), head = double(c.vocab_size) * c.hidden_size;
  const double weights = 2 * params;  // bf16
  const DeviceRoofline h200{4.3e12, 790e12};
  const BurstShape burst{64, 128, 255, 0};
  const double per_position = 901120;
  for (int elem : {2, 1}) {
    const BurstCeiling r = BurstCeilingOf(c, weights, params, head, elem, burst, h200);
    const double positions = 64 * (129.0 + 383.0) * 255 / 2;  // Σ over steps of the rows' contexts
    const double kv = positions * per_position * elem / 2;
    EXPECT_NEAR(r.decode_s, (255 * weights + kv) / h200.bytes_per_s, 1e-9 * r.decode_s);
    EXPECT_DOUBLE_EQ(r.kv_bytes_first_step, 64 * 129 * per_position * elem / 2);
    EXPECT_DOUBLE_EQ(r.kv_bytes_last_step, 64 * 383 * per_position * elem / 2);
    const double prefill_flops = 64 * (2 * (params - head) * 128 + 2 * head);
    EXPECT_NEAR(r.prefill_s, prefill_flops / h200.flop_per_s, 1e-9 * r.prefill_s);
    std::printf("the reference burst on 4.3 TB/s and 790 TFLOP/s, %s KV: prefill %.3f s, decode %.3f s "
                "(%.1f GB of weights + %.1f-%.1f GB of KV per step): at most %.0f output tokens/s\n",
                elem == 2 ? "bf16" : "fp8", r.prefill_s, r.decode_s, weights / 1e9, r.kv_bytes_first_step / 1e9,
                r.kv_bytes_last_step / 1e9, 64 * 256 / (r.prefill_s + r.decode_s));
  }
}

// Where the product rate is the tighter limit, a step takes its FLOPs' time; prompts longer than
// a pass's chunk still take one pass each.
TEST(BurstCeiling, FlopBoundStepsAndOnePromptPerPass) {
  const ModelConfig c = *PresetConfig("tiny");
  const DeviceRoofline slow_products{1e15, 1e9};
  const BurstCeiling r = BurstCeilingOf(c, 1000, 500, 100, 2, {4, 16, 10, 8}, slow_products);
  EXPECT_NEAR(r.decode_s, 10 * 4 * 2.0 * 500 / 1e9, 1e-15);
  EXPECT_NEAR(r.prefill_s, 4 * (2.0 * 400 * 16 + 2.0 * 100) / 1e9, 1e-15);
  // Two prompts per pass of 32 tokens: two passes, each the weights' time when bandwidth-bound.
  const DeviceRoofline slow_memory{1e3, 1e30};
  EXPECT_DOUBLE_EQ(BurstCeilingOf(c, 1000, 500, 100, 2, {4, 16, 0, 32}, slow_memory).prefill_s, 2.0);
}

}  // namespace
}  // namespace gk
