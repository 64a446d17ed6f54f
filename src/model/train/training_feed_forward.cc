// Feed-forward parts of TrainingModel beyond the dense MLP, forward and backward: the MoE block
// of 26B-A4B and the per-layer embeddings (PLE) of E2B/E4B. The same functions as the inference
// pass (model/feed_forward.cc); every weight here is frozen, so the backward passes produce only
// the gradient of the residual stream.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "kernels/gemm.h"
#include "kernels/moe_routing.h"
#include "kernels/ops.h"
#include "kernels/train_ops.h"
#include "model/train/training_buffers.h"
#include "model/train/training_model.h"

namespace gk {

// ple[t, l, :] = (RMSNorm_P(x_emb[t] · W_plmᵀ · D^-½) + E_ple[token] · sqrt(P)) · 2^-½, from the
// scaled embeddings (layer_inputs[0]). Nothing in it depends on a trained parameter.
void TrainingModel::PerLayerInputs() {
  const ModelConfig& c = config_;
  const int64_t D = c.hidden_size, P = c.hidden_size_per_layer_input, LP = int64_t(c.num_layers) * P;
  float* ple = s_->ple.data();
  Product(weights_.ple_model_proj, s_->layer_inputs[0].data(), T_, ple, false);
  const float inv_sqrt_d = 1.f / std::sqrt(float(D)), inv_sqrt2 = 1.f / std::sqrt(2.f);
  const bool keep_u = !s_->ple_u.empty();  // full fine-tuning: the norm's input, for its backward
  // The token's table row; zeros where another rank of a tensor-parallel group holds it.
  auto table_row = [&](int64_t t, float* out) {
    const int32_t id = tokens_[size_t(t)];
    const int64_t row = (id < c.vocab_size_per_layer_input ? id : c.pad_token_id) - ple_vocab_.begin;
    if (row < 0 || row >= ple_vocab_.rows) std::fill(out, out + LP, 0.f);
    else weights_.ple_embed.RowToF32(row, out);
  };
  std::vector<float> tok_rows;  // tensor parallelism: every token's row, summed over the group
  if (options_.tp.active()) {
    tok_rows.resize(size_t(T_ * LP));
    for (int64_t t = 0; t < T_; ++t) table_row(t, tok_rows.data() + t * LP);
    TpSum(tok_rows.data(), T_ * LP);
  }
  pool_->ParallelFor(T_, [&](int64_t b, int64_t e, int) {
    std::vector<float> tok(tok_rows.empty() ? size_t(LP) : 0);
    for (int64_t t = b; t < e; ++t) {
      float* p = ple + t * LP;
      Scale(p, LP, inv_sqrt_d);
      if (keep_u) std::copy(p, p + LP, s_->ple_u.data() + t * LP);
      RmsNormRows(p, weights_.ple_proj_norm.data(), c.num_layers, P, c.rms_norm_eps, p);
      const float* row = tok_rows.empty() ? tok.data() : tok_rows.data() + t * LP;
      if (tok_rows.empty()) table_row(t, tok.data());
      for (int64_t i = 0; i < LP; ++i) p[i] = (p[i] + row[i] * ple_embed_scale_) * inv_sqrt2;
    }
  });
}

// x3 = x2 + RMSNorm(W_proj(gelu_tanh(W_gate x2) · ple[:, l, :]); post_per_layer_input_norm)
void TrainingModel::PleForward(int l, LayerActs& a, const float* x2, float* x3) {
  const ModelConfig& c = config_;
  const LayerWeights& lw = weights_.layers[size_t(l)];
  const int64_t D = c.hidden_size, P = c.hidden_size_per_layer_input, LP = int64_t(c.num_layers) * P;
  Product(lw.ple_gate, x2, T_, a.ple_g.data(), false);
  pool_->ParallelFor(T_, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) {
      const float* p = s_->ple.data() + t * LP + int64_t(l) * P;
      for (int64_t i = 0; i < P; ++i) a.ple_a[size_t(t * P + i)] = GeluTanh(a.ple_g[size_t(t * P + i)]) * p[i];
    }
  });
  Product(lw.ple_proj, a.ple_a.data(), T_, a.ple_o.data(), false);
  RmsNormRows(a.ple_o.data(), lw.post_ple_norm.data(), T_, D, c.rms_norm_eps, x3);
  Add(x2, x3, T_ * D);
}

// dx: the gradient of x3 on entry, of x2 on return.
void TrainingModel::PleBackward(int l, const LayerActs& a, float* dx) {
  const ModelConfig& c = config_;
  const LayerWeights& lw = weights_.layers[size_t(l)];
  const int64_t D = c.hidden_size, P = c.hidden_size_per_layer_input, LP = int64_t(c.num_layers) * P;
  Scratch& s = *s_;
  pool_->ParallelFor(T_, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) {
      RmsNormBackward(a.ple_o.data() + t * D, lw.post_ple_norm.data(), D, c.rms_norm_eps, dx + t * D,
                      s.dd.data() + t * D, false);
    }
  });
  AddNormGrad(lw.post_ple_norm, a.ple_o.data(), dx, T_, D);
  AddMatrixGrad(lw.ple_proj, s.dd.data(), a.ple_a.data(), T_);
  ProductT(lw.ple_proj, s.dd.data(), T_, s.dple.data(), false);
  const bool full_ple = !s.dple_all.empty();  // full fine-tuning: the per-layer input's gradient too
  pool_->ParallelFor(T_, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) {
      const float* p = s.ple.data() + t * LP + int64_t(l) * P;
      for (int64_t i = 0; i < P; ++i) {
        const size_t j = size_t(t * P + i);
        if (full_ple) s.dple_all[size_t(t * LP + int64_t(l) * P + i)] += s.dple[j] * GeluTanh(a.ple_g[j]);
        s.dple[j] *= p[i] * GeluTanhDerivative(a.ple_g[j]);
      }
    }
  });
  AddMatrixGrad(lw.ple_gate, s.dple.data(), a.x2.data(), T_);
  ProductT(lw.ple_gate, s.dple.data(), T_, dx, true);
}

// mm = RMSNorm(m; post_ffw_norm_1) + RMSNorm(y; post_ffw_norm_2), y = Σ_j w_j · expert_j(xe),
// xe = RMSNorm(x1; pre_ffw_norm_2), router probabilities softmax(proj(RMSNorm_noscale(x1) ·
// router.scale · D^-½)), the top k renormalised and times per_expert_scale (as inference's
// MoeBlock, ties to the lower index). Experts run on the tokens routed to them, grouped.
void TrainingModel::MoeForward(int l, LayerActs& a) {
  const ModelConfig& c = config_;
  const LayerWeights& lw = weights_.layers[size_t(l)];
  const int64_t T = T_, D = c.hidden_size, E = c.num_experts, Fe = c.moe_intermediate_size, k = c.top_k_experts;
  const float eps = c.rms_norm_eps;
  Scratch& s = *s_;
  RmsNormRows(a.x1.data(), lw.pre_ffw_norm_2.data(), T, D, eps, a.xe.data());
  MoeRouterInput(l, a);
  // The router stays f32 in either precision: a rounding must not flip which experts a token takes.
  WeightMatMul(lw.router, s.router_in.data(), T, a.probs.data(), false, *pool_);
  pool_->ParallelFor(T, [&](int64_t b, int64_t e, int) {
    std::vector<int32_t> idx(static_cast<size_t>(E));
    for (int64_t t = b; t < e; ++t) {
      RouteToken(a.probs.data() + t * E, E, k, lw.per_expert_scale.data(), a.top.data() + t * k, a.top_w.data() + t * k,
                 idx.data());
    }
  });
  const int64_t n = T * k;
  GroupSlotsByExpert(a.top.data(), n, E, a.expert_begin.data(), a.order.data());
  MoeGatherExpertInputs(a);
  for (int64_t ex = 0; ex < E; ++ex) {
    const int64_t i0 = a.expert_begin[size_t(ex)], ne = a.expert_begin[size_t(ex) + 1] - i0;
    if (ne == 0) continue;
    Product(lw.expert_gate_up[size_t(ex)], s.xg.data() + i0 * D, ne, a.eg.data() + i0 * 2 * Fe, false);
  }
  pool_->ParallelFor(n, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      const float* g = a.eg.data() + i * 2 * Fe;
      GeluTanhMul(g, g + Fe, Fe, a.ea.data() + i * Fe);
    }
  });
  for (int64_t ex = 0; ex < E; ++ex) {
    const int64_t i0 = a.expert_begin[size_t(ex)], ne = a.expert_begin[size_t(ex) + 1] - i0;
    if (ne == 0) continue;
    Product(lw.expert_down[size_t(ex)], a.ea.data() + i0 * Fe, ne, a.eo.data() + i0 * D, false);
  }
  std::fill(a.y.begin(), a.y.begin() + T * D, 0.f);
  for (int64_t i = 0; i < n; ++i) {  // in slot order per token: the same sum for any grouping
    const int64_t slot = a.order[size_t(i)];
    Axpy(a.top_w[size_t(slot)], a.eo.data() + i * D, a.y.data() + (slot / k) * D, D);
  }
  float* dense = s.dm.data();  // scratch here; the backward pass overwrites it
  RmsNormRows(a.m.data(), lw.post_ffw_norm_1.data(), T, D, eps, dense);
  RmsNormRows(a.y.data(), lw.post_ffw_norm_2.data(), T, D, eps, a.mm.data());
  Add(dense, a.mm.data(), T * D);
}

// The router's input RmsNorm_noscale(x1) · router.scale · D^-½ into s_->router_in.
void TrainingModel::MoeRouterInput(int l, const LayerActs& a) {
  const ModelConfig& c = config_;
  const LayerWeights& lw = weights_.layers[size_t(l)];
  const int64_t D = c.hidden_size;
  const float inv_sqrt_d = 1.f / std::sqrt(float(D));
  float* r = s_->router_in.data();
  pool_->ParallelFor(T_, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) {
      RmsNorm(a.x1.data() + t * D, nullptr, D, c.rms_norm_eps, r + t * D);
      for (int64_t i = 0; i < D; ++i) r[t * D + i] *= lw.router_scale[size_t(i)] * inv_sqrt_d;
    }
  });
}

// The experts' input rows in slot order (a.order) into s_->xg.
void TrainingModel::MoeGatherExpertInputs(const LayerActs& a) {
  const int64_t D = config_.hidden_size, k = config_.top_k_experts;
  pool_->ParallelFor(T_ * k, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t t = a.order[size_t(i)] / k;
      std::memcpy(s_->xg.data() + i * D, a.xe.data() + t * D, sizeof(float) * size_t(D));
    }
  });
}

// dmm: the gradient of mm. Writes dm (the gradient of the dense MLP's output m) and adds the
// experts' and the router's gradients of x1 to dx1.
void TrainingModel::MoeBackward(int l, const LayerActs& a, const float* dmm, float* dm, float* dx1) {
  const ModelConfig& c = config_;
  const LayerWeights& lw = weights_.layers[size_t(l)];
  const int64_t T = T_, D = c.hidden_size, E = c.num_experts, Fe = c.moe_intermediate_size, k = c.top_k_experts;
  const float eps = c.rms_norm_eps, inv_sqrt_d = 1.f / std::sqrt(float(D));
  Scratch& s = *s_;
  const int64_t n = T * k;
  if (full_) {  // the weight gradients read these inputs; later layers' forward passes reused the scratch
    MoeRouterInput(l, a);
    MoeGatherExpertInputs(a);
  }
  pool_->ParallelFor(T, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) {
      RmsNormBackward(a.m.data() + t * D, lw.post_ffw_norm_1.data(), D, eps, dmm + t * D, dm + t * D, false);
      RmsNormBackward(a.y.data() + t * D, lw.post_ffw_norm_2.data(), D, eps, dmm + t * D, s.dy.data() + t * D, false);
    }
  });
  AddNormGrad(lw.post_ffw_norm_1, a.m.data(), dmm, T, D);
  AddNormGrad(lw.post_ffw_norm_2, a.y.data(), dmm, T, D);
  // y = Σ_j w_j · eo_j: deo_j = w_j · dy, dw_j = dy · eo_j (into s.dz's first T·k entries first).
  std::vector<float> dw(static_cast<size_t>(n));
  pool_->ParallelFor(n, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t slot = a.order[size_t(i)];
      const float* dy = s.dy.data() + (slot / k) * D;
      const float* eo = a.eo.data() + i * D;
      float* deo = s.deo.data() + i * D;
      const float w = a.top_w[size_t(slot)];
      double dot = 0;
      for (int64_t d = 0; d < D; ++d) {
        dot += double(dy[d]) * eo[d];
        deo[d] = w * dy[d];
      }
      dw[size_t(slot)] = float(dot);
    }
  });
  // Through each expert: eo = down · act, act = gelu(gate) · up, gate|up = gate_up · xe.
  for (int64_t ex = 0; ex < E; ++ex) {
    const int64_t i0 = a.expert_begin[size_t(ex)], ne = a.expert_begin[size_t(ex) + 1] - i0;
    if (ne == 0) continue;
    AddMatrixGrad(lw.expert_down[size_t(ex)], s.deo.data() + i0 * D, a.ea.data() + i0 * Fe, ne);
    ProductT(lw.expert_down[size_t(ex)], s.deo.data() + i0 * D, ne, s.dact.data() + i0 * Fe, false);
  }
  pool_->ParallelFor(n, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      const float* g = a.eg.data() + i * 2 * Fe;
      float* dg = s.dgu.data() + i * 2 * Fe;
      GeluTanhMulBackward(g, g + Fe, s.dact.data() + i * Fe, Fe, dg, dg + Fe);
    }
  });
  for (int64_t ex = 0; ex < E; ++ex) {
    const int64_t i0 = a.expert_begin[size_t(ex)], ne = a.expert_begin[size_t(ex) + 1] - i0;
    if (ne == 0) continue;
    AddMatrixGrad(lw.expert_gate_up[size_t(ex)], s.dgu.data() + i0 * 2 * Fe, s.xg.data() + i0 * D, ne);
    ProductT(lw.expert_gate_up[size_t(ex)], s.dgu.data() + i0 * 2 * Fe, ne, s.dxg.data() + i0 * D, false);
  }
  std::fill(s.dxe.begin(), s.dxe.begin() + T * D, 0.f);
  for (int64_t i = 0; i < n; ++i) Add(s.dxg.data() + i * D, s.dxe.data() + (a.order[size_t(i)] / k) * D, D);
  // The routing weights w_j = p_j / S · scale_j, S = Σ_top p: dp_j = (dw_j·scale_j − Σ_i dw_i·w_i) / S
  // on the chosen experts, 0 elsewhere; then the softmax: dz = p ∘ (dp − p·dp).
  pool_->ParallelFor(T, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) {
      RouteTokenBackward(a.probs.data() + t * E, E, k, a.top.data() + t * k, a.top_w.data() + t * k, dw.data() + t * k,
                         lw.per_expert_scale.data(), s.dz.data() + t * E);
    }
  });
  if (float* g = WeightGrad(&lw.per_expert_scale)) {  // w_j = p_j / S · scale_e: dscale_e += dw_j · p_j / S
    for (int64_t t = 0; t < T; ++t) {
      const float* p = a.probs.data() + t * E;
      double total = 0;
      for (int64_t j = 0; j < k; ++j) total += p[a.top[size_t(t * k + j)]];
      for (int64_t j = 0; j < k; ++j) {
        const int32_t ex = a.top[size_t(t * k + j)];
        g[ex] += float(double(dw[size_t(t * k + j)]) * p[ex] / total);
      }
    }
  }
  AddMatrixGrad(lw.router, s.dz.data(), s.router_in.data(), T);
  WeightMatMulT(lw.router, s.dz.data(), T, s.drouter_in.data(), false, *pool_);
  // r = RmsNorm_noscale(x1) · scale · D^-½: scale's gradient is a norm weight's over dr · D^-½.
  Scale(s.drouter_in.data(), T * D, inv_sqrt_d);
  AddNormGrad(lw.router_scale, a.x1.data(), s.drouter_in.data(), T, D);
  AddNormGrad(lw.pre_ffw_norm_2, a.x1.data(), s.dxe.data(), T, D);
  pool_->ParallelFor(T, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) {
      float* dr = s.drouter_in.data() + t * D;
      for (int64_t i = 0; i < D; ++i) dr[i] *= lw.router_scale[size_t(i)];
      RmsNormBackward(a.x1.data() + t * D, nullptr, D, eps, dr, dx1 + t * D, true);
      RmsNormBackward(a.x1.data() + t * D, lw.pre_ffw_norm_2.data(), D, eps, s.dxe.data() + t * D, dx1 + t * D,
                      true);
    }
  });
}

}  // namespace gk
