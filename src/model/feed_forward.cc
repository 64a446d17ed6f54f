// Feed-forward parts of a decoder layer: the GeGLU MLP, the mixture-of-experts block of
// 26B-A4B, and the per-layer embeddings (PLE) of E2B/E4B.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "kernels/matmul.h"
#include "kernels/moe_routing.h"
#include "kernels/ops.h"
#include "model/forward_scratch.h"
#include "model/gemma_model.h"

namespace gk {

void GemmaModel::FeedForwardBlock(int l, int64_t T) {
  const ModelConfig& c = config_;
  const LayerWeights& lw = weights_.layers[size_t(l)];
  const int64_t D = c.hidden_size, F = c.MlpWidth(l);
  RmsNormRows(s_->x.data(), lw.pre_ffw_norm.data(), T, D, c.rms_norm_eps, s_->xn.data());
  const WeightProduct gate_up[] = {{&lw.gate, s_->gate.data()}, {&lw.up, s_->up.data()}};
  MatMulShared(gate_up, s_->xn.data(), T, *pool_);
  ApplyLora(l, {{LoraTarget::kGate, s_->gate.data()}, {LoraTarget::kUp, s_->up.data()}}, s_->xn.data());
  pool_->ParallelFor(T * F, [&](int64_t b, int64_t e, int) {
    GeluTanhMul(s_->gate.data() + b, s_->up.data() + b, e - b, s_->gate.data() + b);
  });
  MatMul(lw.down, s_->gate.data(), T, s_->out.data(), *pool_);
  ApplyLora(l, {{LoraTarget::kDown, s_->out.data()}}, s_->gate.data());
  TpSum(s_->out.data(), T * D);  // down is row-parallel: each rank's MLP columns' share
  if (c.enable_moe_block) MoeBlock(l, T);
}

// out = RMSNorm(dense; post_ffw_norm_1) + RMSNorm(Σ_top-k w_e · expert_e(RMSNorm(x; pre_ffw_norm_2)); post_ffw_norm_2)
// with router weights softmax(proj(RMSNorm_noscale(x) · router.scale · D^-½)) over all experts,
// the top k renormalised and multiplied by per_expert_scale.
void GemmaModel::MoeBlock(int l, int64_t T) {
  const ModelConfig& c = config_;
  const LayerWeights& lw = weights_.layers[size_t(l)];
  const int64_t D = c.hidden_size, E = c.num_experts, Fe = c.moe_intermediate_size, topk = c.top_k_experts;
  const float eps = c.rms_norm_eps;
  const float* x = s_->x.data();
  float* out = s_->out.data();
  RmsNormRows(out, lw.post_ffw_norm_1.data(), T, D, eps, out);
  RmsNormRows(x, lw.pre_ffw_norm_2.data(), T, D, eps, s_->moe_x.data());
  float* r = s_->moe_out.data();  // router input, reused as the experts' sum below
  const float inv_sqrt_d = 1.f / std::sqrt(float(D));
  for (int64_t t = 0; t < T; ++t) {
    RmsNorm(x + t * D, nullptr, D, eps, r + t * D);
    for (int64_t i = 0; i < D; ++i) r[t * D + i] *= lw.router_scale[size_t(i)] * inv_sqrt_d;
  }
  MatMul(lw.router, r, T, s_->router.data(), *pool_);
  std::memset(r, 0, sizeof(float) * size_t(T * D));
  pool_->ParallelFor(T, [&](int64_t b, int64_t e, int thread) {
    float* tmp = s_->expert_tmp[size_t(thread)].data();  // gate_up (2·Fe), h (Fe), down (D)
    std::vector<int32_t> idx(static_cast<size_t>(E)), top(static_cast<size_t>(topk));
    std::vector<float> weights(static_cast<size_t>(topk));
    for (int64_t t = b; t < e; ++t) {
      RouteToken(s_->router.data() + t * E, E, topk, lw.per_expert_scale.data(), top.data(), weights.data(), idx.data());
      for (int64_t k = 0; k < topk; ++k) {
        const int64_t ex = top[size_t(k)];
        const float weight = weights[size_t(k)];
        const MatrixView& gu = lw.expert_gate_up[size_t(ex)];
        MatMulRows(gu, s_->moe_x.data() + t * D, 1, tmp, 0, gu.rows);
        GeluTanhMul(tmp, tmp + Fe, Fe, tmp + 2 * Fe);
        const MatrixView& dn = lw.expert_down[size_t(ex)];
        MatMulRows(dn, tmp + 2 * Fe, 1, tmp + 3 * Fe, 0, dn.rows);
        Axpy(weight, tmp + 3 * Fe, r + t * D, D);
      }
    }
  });
  TpSum(r, T * D);  // each rank ran its share of every chosen expert's width
  RmsNormRows(r, lw.post_ffw_norm_2.data(), T, D, eps, r);
  Add(r, out, T * D);
}

// ple[t, l, :] = (RMSNorm_P(x_emb[t] · W_plmᵀ · D^-½) + E_ple[token] · sqrt(P)) · 2^-½
void GemmaModel::PerLayerInputs(const int32_t* tokens, int64_t T, const float* x_emb) {
  const ModelConfig& c = config_;
  const int64_t D = c.hidden_size, P = c.hidden_size_per_layer_input, LP = int64_t(c.num_layers) * P;
  float* ple = s_->ple.data();
  MatMul(weights_.ple_model_proj, x_emb, T, ple, *pool_);
  const float inv_sqrt_d = 1.f / std::sqrt(float(D)), inv_sqrt2 = 1.f / std::sqrt(2.f);
  auto table_row = [&](int64_t t, float* out) {  // zeros where another rank holds the row
    const int64_t row = (tokens[t] < c.vocab_size_per_layer_input ? tokens[t] : c.pad_token_id) - ple_vocab_.begin;
    if (row < 0 || row >= ple_vocab_.rows) std::fill(out, out + LP, 0.f);
    else weights_.ple_embed.RowToF32(row, out);
  };
  if (tp_.active()) {  // every token's row, summed over the group at once
    for (int64_t t = 0; t < T; ++t) table_row(t, s_->ple_tok.data() + t * LP);
    TpSum(s_->ple_tok.data(), T * LP);
  }
  for (int64_t t = 0; t < T; ++t) {
    float* p = ple + t * LP;
    Scale(p, LP, inv_sqrt_d);
    RmsNormRows(p, weights_.ple_proj_norm.data(), c.num_layers, P, c.rms_norm_eps, p);
    const float* tok = s_->ple_tok.data();
    if (tp_.active()) tok += t * LP;
    else table_row(t, s_->ple_tok.data());
    for (int64_t i = 0; i < LP; ++i) p[i] = (p[i] + tok[i] * ple_embed_scale_) * inv_sqrt2;
  }
}

// x += RMSNorm(W_proj(gelu_tanh(W_gate x) · ple[:, l, :]); post_per_layer_input_norm)
void GemmaModel::PerLayerInputBlock(int l, int64_t T) {
  const ModelConfig& c = config_;
  const LayerWeights& lw = weights_.layers[size_t(l)];
  const int64_t D = c.hidden_size, P = c.hidden_size_per_layer_input, LP = int64_t(c.num_layers) * P;
  float* g = s_->ple_gate.data();
  MatMul(lw.ple_gate, s_->x.data(), T, g, *pool_);
  for (int64_t t = 0; t < T; ++t) {
    const float* p = s_->ple.data() + t * LP + int64_t(l) * P;
    for (int64_t i = 0; i < P; ++i) g[t * P + i] = GeluTanh(g[t * P + i]) * p[i];
  }
  MatMul(lw.ple_proj, g, T, s_->out.data(), *pool_);
  RmsNormRows(s_->out.data(), lw.post_ple_norm.data(), T, D, c.rms_norm_eps, s_->out.data());
  Add(s_->out.data(), s_->x.data(), T * D);
}

}  // namespace gk
