// The Tunix layout against the spec's index formulas (../shared/spec/gemma4.md §3.2-3.3),
// written out element by element here, and exact round trips in both directions.
#include "model/tunix_layout.h"

#include <gtest/gtest.h>

#include <map>
#include <numeric>

#include "model/toy_models_test_util.h"

namespace gk {
namespace {

std::vector<float> Iota(int64_t n, float start) {
  std::vector<float> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), start);
  return v;
}

const uint8_t* B(const std::vector<float>& v) { return reinterpret_cast<const uint8_t*>(v.data()); }
uint8_t* B(std::vector<float>& v) { return reinterpret_cast<uint8_t*>(v.data()); }

TEST(TunixLayout, BaseArraysFollowTheSpecIndexFormulas) {
  const ModelConfig c = ToyConfig("tiny", 8);  // layer 5 is a full K=V layer
  auto layout = TunixBaseLayout(c, "model.language_model.");
  ASSERT_TRUE(layout.ok()) << layout.message();
  std::map<std::string, const TunixArray*> by_path;
  for (const TunixArray& a : *layout) by_path[a.path] = &a;
  const int64_t D = c.hidden_size, N = c.num_heads;
  {  // q_einsum[n, d, h] = q_proj[n·H + h, d]
    const TunixArray& a = *by_path.at("layers.0.attn.q_einsum.w");
    const int64_t H = c.HeadDim(0);
    EXPECT_EQ(a.shape, (std::vector<int64_t>{N, D, H}));
    EXPECT_EQ(a.hf[0], "model.language_model.layers.0.self_attn.q_proj.weight");
    const auto w = Iota(N * H * D, 0);
    std::vector<float> t(w.size());
    HfToTunix(a, {B(w)}, 4, B(t));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t d = 0; d < D; d += 7)
        for (int64_t h = 0; h < H; h += 5) ASSERT_EQ(t[size_t((n * D + d) * H + h)], w[size_t((n * H + h) * D + d)]);
    std::vector<float> back(w.size());
    TunixToHf(a, B(t), 4, {B(back)});
    EXPECT_EQ(back, w);
  }
  {  // kv_einsum[c, k, d, h] = (c == 0 ? k_proj : v_proj)[k·H + h, d]
    const TunixArray& a = *by_path.at("layers.0.attn.kv_einsum.w");
    const int64_t H = c.HeadDim(0), K = c.KvHeads(0);
    EXPECT_EQ(a.shape, (std::vector<int64_t>{2, K, D, H}));
    const auto k = Iota(K * H * D, 0), v = Iota(K * H * D, 1e6f);
    std::vector<float> t(2 * k.size());
    HfToTunix(a, {B(k), B(v)}, 4, B(t));
    for (int64_t kk = 0; kk < K; ++kk)
      for (int64_t d = 0; d < D; d += 3)
        for (int64_t h = 0; h < H; h += 3) {
          ASSERT_EQ(t[size_t(((0 * K + kk) * D + d) * H + h)], k[size_t((kk * H + h) * D + d)]);
          ASSERT_EQ(t[size_t(((1 * K + kk) * D + d) * H + h)], v[size_t((kk * H + h) * D + d)]);
        }
    std::vector<float> k2(k.size()), v2(v.size());
    TunixToHf(a, B(t), 4, {B(k2), B(v2)});
    EXPECT_EQ(k2, k);
    EXPECT_EQ(v2, v);
  }
  EXPECT_TRUE(by_path.count("layers.5.attn.k_einsum.w"));  // K=V layer: no kv_einsum, no v_proj
  EXPECT_FALSE(by_path.count("layers.5.attn.kv_einsum.w"));
  {  // attn_vec_einsum[n, h, d] = o_proj[d, n·H + h]
    const TunixArray& a = *by_path.at("layers.5.attn.attn_vec_einsum.w");
    const int64_t H = c.HeadDim(5);
    EXPECT_EQ(a.shape, (std::vector<int64_t>{N, H, D}));
    const auto w = Iota(D * N * H, 0);
    std::vector<float> t(w.size());
    HfToTunix(a, {B(w)}, 4, B(t));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t h = 0; h < H; h += 3)
        for (int64_t d = 0; d < D; d += 5) ASSERT_EQ(t[size_t((n * H + h) * D + d)], w[size_t(d * N * H + n * H + h)]);
  }
  {  // gate_proj.kernel[d, f] = gate_proj[f, d]
    const TunixArray& a = *by_path.at("layers.1.mlp.gate_proj.kernel");
    const int64_t F = c.MlpWidth(1);
    EXPECT_EQ(a.shape, (std::vector<int64_t>{D, F}));
    const auto w = Iota(F * D, 0);
    std::vector<float> t(w.size());
    HfToTunix(a, {B(w)}, 4, B(t));
    EXPECT_EQ(t[size_t(3 * F + 17)], w[size_t(17 * D + 3)]);
  }
  EXPECT_TRUE(by_path.count("layers.2.skip_scale"));
  EXPECT_TRUE(by_path.count("final_norm.scale"));
  EXPECT_TRUE(by_path.count("embedder.input_embedding"));
  EXPECT_EQ(TunixKey({"layers", "0", "attn", "q_einsum", "w", "value"}), "layers.0.attn.q_einsum.w");
}

TEST(TunixLayout, QwixFactorsFollowTheSpecAndRoundTrip) {
  const ModelConfig c = ToyConfig("tiny", 8);
  const int r = 3;
  const std::string p = "model.";
  std::vector<std::string> modules;
  for (int l = 0; l < c.num_layers; ++l) {
    for (const char* m : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.down_proj"}) {
      if (std::string(m) == "self_attn.v_proj" && c.KEqV(l)) continue;
      modules.push_back(StrCat(p, "layers.", l, ".", m));
    }
  }
  auto layout = QwixLoraLayout(c, p, r, modules);
  ASSERT_TRUE(layout.ok()) << layout.message();
  std::map<std::string, const QwixLoraArray*> by_path;
  for (const QwixLoraArray& a : *layout) by_path[a.path] = &a;
  const int64_t D = c.hidden_size, N = c.num_heads;
  {  // kv_einsum B (r, 2, K, H): k's PEFT B[k·H + h, ρ] = B[ρ, 0, k, h]
    const QwixLoraArray& b = *by_path.at("layers.0.attn.kv_einsum.w_lora_b");
    const int64_t K = c.KvHeads(0), H = c.HeadDim(0);
    EXPECT_EQ(b.shape, (std::vector<int64_t>{r, 2, K, H}));
    const auto q = Iota(r * 2 * K * H, 0);
    std::vector<float> kb(size_t(K * H * r)), vb(kb.size());
    QwixToPeft(b, B(q), 4, {B(kb), B(vb)});
    for (int64_t rho = 0; rho < r; ++rho)
      for (int64_t j = 0; j < K * H; ++j) {
        ASSERT_EQ(kb[size_t(j * r + rho)], q[size_t(rho * 2 * K * H + j)]);
        ASSERT_EQ(vb[size_t(j * r + rho)], q[size_t(rho * 2 * K * H + K * H + j)]);
      }
    std::vector<float> back(q.size());
    ASSERT_TRUE(PeftToQwix(b, {B(kb), B(vb)}, 4, B(back)).ok());
    EXPECT_EQ(back, q);
    // One shared A: equal PEFT A's convert, different ones are refused.
    const QwixLoraArray& a = *by_path.at("layers.0.attn.kv_einsum.w_lora_a");
    EXPECT_TRUE(a.shared_a);
    const auto pa = Iota(r * D, 0);
    auto pa2 = pa;
    std::vector<float> qa(pa.size());
    ASSERT_TRUE(PeftToQwix(a, {B(pa), B(pa2)}, 4, B(qa)).ok());
    EXPECT_EQ(qa[size_t(5 * r + 1)], pa[size_t(1 * D + 5)]);  // Qwix A (D, r) = PEFT Aᵀ
    pa2[3] += 1;
    Status s = PeftToQwix(a, {B(pa), B(pa2)}, 4, B(qa));
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("shares one"), std::string::npos) << s.message();
  }
  {  // attn_vec_einsum A (N, H, r): PEFT A[ρ, n·H + h] = A[n, h, ρ]
    const QwixLoraArray& a = *by_path.at("layers.5.attn.attn_vec_einsum.w_lora_a");
    const int64_t H = c.HeadDim(5);
    EXPECT_EQ(a.shape, (std::vector<int64_t>{N, H, r}));
    const auto q = Iota(N * H * r, 0);
    std::vector<float> pa(q.size());
    QwixToPeft(a, B(q), 4, {B(pa)});
    EXPECT_EQ(pa[size_t(2 * N * H + 1 * H + 4)], q[size_t((1 * H + 4) * r + 2)]);
  }
  EXPECT_TRUE(by_path.count("layers.5.attn.k_einsum.w_lora_a"));
  EXPECT_TRUE(by_path.count("layers.3.mlp.down_proj.kernel_lora_b"));
  // k without v on a fused layer is not representable.
  auto partial = QwixLoraLayout(c, p, r, {"model.layers.0.self_attn.k_proj"});
  EXPECT_FALSE(partial.ok());
}

}  // namespace
}  // namespace gk
