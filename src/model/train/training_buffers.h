// Activation and gradient buffers of TrainingModel, resized per micro-batch (capacity kept).
// Private to model/train/. Shapes use the letters of model/config.h; T is the micro-batch's
// token count.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/train/lora.h"
#include "model/train/training_model.h"

namespace gk {

// What one layer's backward pass reads, written by its forward pass.
struct TrainingModel::LayerActs {
  std::vector<float> xn;                  // (T, D) input_layernorm output
  std::vector<float> q_raw, k_raw, v_raw;  // projections before their norms: (T, N·H), (T, K·H) x2
  std::vector<float> q, k, v;             // after norm (+ RoPE for q, k)
  std::vector<float> att;                 // (T, N·H) attention output
  std::vector<float> lse;                 // (N, T) log-sum-exp of each query's scores
  std::vector<float> o;                   // (T, D) o_proj output
  std::vector<float> x1;                  // (T, D) residual after attention
  std::vector<float> xn2;                 // (T, D) pre_feedforward_layernorm output
  std::vector<float> g, up, act;          // (T, F) gate, up, gelu(gate)·up
  std::vector<float> m;                   // (T, D) down_proj output
  std::vector<float> u[kNumLoraTargets];  // (T, r) LoRA A-products drop(x)·Aᵀ
  // MoE layers (26B-A4B): the feed-forward output is mm = RmsNorm(m) + RmsNorm(y).
  std::vector<float> mm;                  // (T, D)
  std::vector<float> xe;                  // (T, D) pre_feedforward_layernorm_2 output: the experts' input
  std::vector<float> probs;               // (T, E) router softmax
  std::vector<int32_t> top;               // (T, k) chosen experts, by falling probability
  std::vector<float> top_w;               // (T, k) their weights (renormalised, times per_expert_scale)
  std::vector<int32_t> order;             // (T·k) the (token, choice) slots t·k + j sorted by expert
  std::vector<int64_t> expert_begin;      // (E + 1) each expert's first entry of `order`
  std::vector<float> eg, ea, eo;          // (T·k, 2·Fe), (T·k, Fe), (T·k, D) in `order`: gate|up, act, output
  std::vector<float> y;                   // (T, D) Σ_j top_w · expert output
  // PLE layers (E2B/E4B): x_out = (x2 + RmsNorm(ple_o)) · layer_scalar.
  std::vector<float> x2;                  // (T, D) residual after the feed-forward block
  std::vector<float> ple_g;               // (T, P) per_layer_input_gate output
  std::vector<float> ple_a;               // (T, P) gelu(ple_g) · per-layer input
  std::vector<float> ple_o;               // (T, D) per_layer_projection output

  // Sized for layer l (l = -1: the largest layer, for the shared remat buffer).
  void Resize(const ModelConfig& c, const LoraAdapter* adapter, int l, int64_t T) {
    int64_t H = 0, K = 0, F = 0;
    bool lora[kNumLoraTargets] = {};
    for (int i = 0; i < c.num_layers; ++i) {
      if (l >= 0 && i != l) continue;
      H = std::max<int64_t>(H, c.HeadDim(i));
      K = std::max<int64_t>(K, c.KvHeads(i));
      F = std::max<int64_t>(F, c.MlpWidth(i));
      for (int t = 0; t < kNumLoraTargets; ++t) lora[t] |= adapter && adapter->Find(i, LoraTarget(t)) != nullptr;
    }
    const size_t D = size_t(c.hidden_size), NH = size_t(c.num_heads * H), KH = size_t(K * H), n = size_t(T);
    xn.resize(n * D);
    q_raw.resize(n * NH);
    k_raw.resize(n * KH);
    v_raw.resize(n * KH);
    q.resize(n * NH);
    k.resize(n * KH);
    v.resize(n * KH);
    att.resize(n * NH);
    lse.resize(size_t(c.num_heads) * n);
    o.resize(n * D);
    x1.resize(n * D);
    xn2.resize(n * D);
    g.resize(n * size_t(F));
    up.resize(n * size_t(F));
    act.resize(n * size_t(F));
    m.resize(n * D);
    for (int t = 0; t < kNumLoraTargets; ++t) u[t].resize(lora[t] ? n * size_t(adapter->rank()) : 0);
    const size_t moe = c.enable_moe_block ? n : 0, E = size_t(c.num_experts), k = size_t(c.top_k_experts);
    const size_t Fe = size_t(c.moe_intermediate_size);
    mm.resize(moe * D);
    xe.resize(moe * D);
    probs.resize(moe * E);
    top.resize(moe * k);
    top_w.resize(moe * k);
    order.resize(moe * k);
    expert_begin.resize(c.enable_moe_block ? E + 1 : 0);
    eg.resize(moe * k * 2 * Fe);
    ea.resize(moe * k * Fe);
    eo.resize(moe * k * D);
    y.resize(moe * D);
    const size_t ple = c.hidden_size_per_layer_input > 0 ? n : 0, P = size_t(c.hidden_size_per_layer_input);
    x2.resize(ple * D);
    ple_g.resize(ple * P);
    ple_a.resize(ple * P);
    ple_o.resize(ple * D);
  }
  int64_t Bytes() const {
    size_t n = xn.size() + q_raw.size() + k_raw.size() + v_raw.size() + q.size() + k.size() + v.size() +
               att.size() + lse.size() + o.size() + x1.size() + xn2.size() + g.size() + up.size() + act.size() +
               m.size() + mm.size() + xe.size() + probs.size() + top.size() + top_w.size() + order.size() +
               eg.size() + ea.size() + eo.size() + y.size() + x2.size() + ple_g.size() + ple_a.size() + ple_o.size();
    for (const auto& x : u) n += x.size();
    return int64_t(n * sizeof(float));
  }
};

// Gradients and temporaries of one micro-batch.
struct TrainingModel::Scratch {
  std::vector<std::vector<float>> layer_inputs;  // L + 1 of (T, D): each layer's input, then the output
  std::vector<float> x_tmp;    // (T, D) where a remat recompute puts the layer output (already known)
  std::vector<float> dx;       // (T, D) gradient of the residual stream
  std::vector<float> dxn;      // (T, D) gradient of a norm's output
  std::vector<float> dd;       // (T, D)
  std::vector<float> datt;     // (T, N·Hmax)
  std::vector<float> dq;       // (T, N·Hmax)
  std::vector<float> dk, dv;   // (T, Kmax·Hmax)
  std::vector<float> df1, df2, df3;  // (T, Fmax)
  std::vector<float> drop;     // (T, max in) dropout-masked LoRA input
  std::vector<float> du;       // (T, r)
  std::vector<float> lora_dx;  // (T, max in) LoRA input gradient before the dropout mask
  std::vector<float> scores, probs, dprobs;  // attention blocks (bq, T), one per pool thread
  std::vector<float> delta;    // (T) rowsum(dO · O) of one head, one per pool thread
  std::vector<float> dk_parts, dv_parts;  // (tasks, T, H) the backward tasks' dK/dV (training_attention.cc)
  // RoPE cos|sin of every token of the micro-batch, (T, H), per distinct frequency table (a
  // layer type's): TrainingModel::RopeTable, rebuilt by each micro-batch.
  std::vector<std::pair<const float*, std::vector<float>>> rope_tables;
  // KV sharing: per layer that shared layers read, its K and V (after norm and RoPE) and the
  // gradient the shared layers send back to them; empty for other layers.
  std::vector<std::vector<float>> shared_k, shared_v, shared_dk, shared_dv;
  // PLE: (T, L·P) per-layer inputs, computed once per micro-batch from the embeddings.
  std::vector<float> ple;
  std::vector<float> dple;     // (T, P)
  // Full fine-tuning of PLE models: the per-layer inputs' gradient, the projection before its
  // norm, and that norm's input gradient, each (T, L·P).
  std::vector<float> dple_all, ple_u, ple_du;
  // MoE temporaries.
  std::vector<float> router_in, drouter_in;  // (T, D)
  std::vector<float> dz;                     // (T, E)
  std::vector<float> dm, dy, dxe;            // (T, D)
  std::vector<float> xg, dxg, deo;           // (T·k, D) expert inputs / their gradients / output gradients
  std::vector<float> dact, dgu;              // (T·k, Fe), (T·k, 2·Fe)
  // Loss head.
  std::vector<int64_t> loss_rows;
  std::vector<int32_t> loss_targets;
  std::vector<float> h, dh, e_chunk, z;

  void Resize(const ModelConfig& c, int rank, int64_t T, bool full) {
    int64_t H = c.MaxHeadDim(), K = c.MaxKvHeads(), F = 0;
    for (int i = 0; i < c.num_layers; ++i) F = std::max<int64_t>(F, c.MlpWidth(i));
    const size_t D = size_t(c.hidden_size), n = size_t(T);
    const size_t in_max = std::max({D, size_t(F), size_t(c.num_heads * H)});
    x_tmp.resize(n * D);
    dx.resize(n * D);
    dxn.resize(n * D);
    dd.resize(n * D);
    datt.resize(n * size_t(c.num_heads * H));
    dq.resize(n * size_t(c.num_heads * H));
    dk.resize(n * size_t(K * H));
    dv.resize(n * size_t(K * H));
    df1.resize(n * size_t(F));
    df2.resize(n * size_t(F));
    df3.resize(n * size_t(F));
    drop.resize(n * in_max);
    lora_dx.resize(n * in_max);
    du.resize(n * size_t(std::max(rank, 1)));
    delta.resize(n);
    shared_k.resize(size_t(c.num_layers));
    shared_v.resize(size_t(c.num_layers));
    shared_dk.resize(size_t(c.num_layers));
    shared_dv.resize(size_t(c.num_layers));
    for (int l = 0; l < c.num_layers; ++l) {
      const size_t kv = c.IsKvSource(l) ? n * size_t(c.KvHeads(l)) * size_t(c.HeadDim(l)) : 0;
      shared_k[size_t(l)].resize(kv);
      shared_v[size_t(l)].resize(kv);
      shared_dk[size_t(l)].resize(kv);
      shared_dv[size_t(l)].resize(kv);
    }
    const size_t P = size_t(c.hidden_size_per_layer_input);
    ple.resize(n * size_t(c.num_layers) * P);
    dple.resize(n * P);
    for (auto* v : {&dple_all, &ple_u, &ple_du}) v->resize(full ? n * size_t(c.num_layers) * P : 0);
    const size_t moe = c.enable_moe_block ? n : 0, k = size_t(c.top_k_experts), Fe = size_t(c.moe_intermediate_size);
    router_in.resize(moe * D);
    drouter_in.resize(moe * D);
    dz.resize(moe * size_t(c.num_experts));
    dm.resize(moe * D);
    dy.resize(moe * D);
    dxe.resize(moe * D);
    xg.resize(moe * k * D);
    dxg.resize(moe * k * D);
    deo.resize(moe * k * D);
    dact.resize(moe * k * Fe);
    dgu.resize(moe * k * 2 * Fe);
  }
};

}  // namespace gk
