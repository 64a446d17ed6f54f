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
  }
  int64_t Bytes() const {
    size_t n = xn.size() + q_raw.size() + k_raw.size() + v_raw.size() + q.size() + k.size() + v.size() +
               att.size() + lse.size() + o.size() + x1.size() + xn2.size() + g.size() + up.size() + act.size() +
               m.size();
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
  std::vector<float> scores, probs, dprobs;  // attention blocks (bq, T)
  std::vector<float> delta;    // (T) rowsum(dO · O) of one head
  // Loss head.
  std::vector<int64_t> loss_rows;
  std::vector<int32_t> loss_targets;
  std::vector<float> h, dh, e_chunk, z;

  void Resize(const ModelConfig& c, int rank, int64_t T) {
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
  }
};

}  // namespace gk
