// One decoder layer of TrainingModel: forward (keeping what the backward pass reads) and
// backward, and the LoRA-carrying projections y = x·Wᵀ + s·(drop(x)·Aᵀ)·Bᵀ.
#include <algorithm>
#include <cstring>
#include <functional>

#include "kernels/gemm.h"
#include "kernels/gemm_bf16.h"
#include "kernels/ops.h"
#include "kernels/train_ops.h"
#include "model/train/training_buffers.h"
#include "model/train/training_model.h"

namespace gk {

// drop(x) for the LoRA of (layer, target): x itself without dropout, else x·keep/(1−p) into
// buf, the keep mask drawn from (dropout key, layer, target, element) so that the backward
// pass (and a remat recompute) draws the same mask.
const float* TrainingModel::DropoutInput(int l, LoraTarget t, const float* x, int64_t in, float* buf) const {
  if (!dropout_on_) return x;
  const float p = float(adapter_->options().dropout), keep_scale = 1.f / (1.f - p);
  const uint64_t key = MixKey(MixKey(dropout_key_, uint64_t(l)), uint64_t(t));
  pool_->ParallelFor(T_ * in, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) buf[i] = CounterUniform(key, DropIndex(t, i, in)) >= p ? x[i] * keep_scale : 0.f;
  });
  return buf;
}

void TrainingModel::Product(const MatrixView& w, const float* x, int64_t T, float* y, bool accumulate) {
  if (Bf16Products(w)) return Bf16WeightMatMul(w, x, T, y, accumulate, *pool_);
  WeightMatMul(w, x, T, y, accumulate, *pool_);
}

void TrainingModel::ProductT(const MatrixView& w, const float* dy, int64_t T, float* dx, bool accumulate) {
  if (Bf16Products(w)) return Bf16WeightMatMulT(w, dy, T, dx, accumulate, *pool_);
  WeightMatMulT(w, dy, T, dx, accumulate, *pool_);
}

void TrainingModel::Linear(int l, LoraTarget t, const MatrixView& w, const float* x, float* y, float* u, bool dropout) {
  Product(w, x, T_, y, false);
  const LoraModule* m = adapter_ ? adapter_->Find(l, t) : nullptr;
  if (!m) return;
  const int64_t r = adapter_->rank();
  const float* xd = dropout ? DropoutInput(l, t, x, m->in, s_->drop.data()) : x;
  Sgemm(false, true, T_, r, m->in, 1.f, xd, m->in, m->a.data(), m->in, 0.f, u, r);
  Sgemm(false, true, T_, m->out, r, adapter_->scaling(), u, r, m->b.data(), r, 1.f, y, m->out);
}

void TrainingModel::LinearBackward(int l, LoraTarget t, const MatrixView& w, const float* x, const float* u,
                                   const float* dy, float* dx, bool accumulate) {
  AddMatrixGrad(w, dy, x, T_);  // full fine-tuning only
  ProductT(w, dy, T_, dx, accumulate);
  LoraModule* m = adapter_ ? adapter_->Find(l, t) : nullptr;
  if (!m) return;
  const int64_t r = adapter_->rank(), in = m->in, out = m->out;
  const float s = adapter_->scaling();
  float* du = s_->du.data();
  Sgemm(true, false, out, r, T_, s, dy, out, u, r, 1.f, m->grad_b.data(), r);    // dB += s·dyᵀ·u
  Sgemm(false, false, T_, r, out, s, dy, out, m->b.data(), r, 0.f, du, r);        // du = s·dy·B
  const float* xd = DropoutInput(l, t, x, in, s_->drop.data());
  Sgemm(true, false, r, in, T_, 1.f, du, r, xd, in, 1.f, m->grad_a.data(), in);  // dA += duᵀ·drop(x)
  if (!dropout_on_) {
    Sgemm(false, false, T_, in, r, 1.f, du, r, m->a.data(), in, 1.f, dx, in);    // dx += du·A
    return;
  }
  float* g = s_->lora_dx.data();
  Sgemm(false, false, T_, in, r, 1.f, du, r, m->a.data(), in, 0.f, g, in);
  // Through the mask, redrawn from its key (xd == 0 cannot tell a dropped element from x == 0).
  const float p = float(adapter_->options().dropout), keep_scale = 1.f / (1.f - p);
  const uint64_t key = MixKey(MixKey(dropout_key_, uint64_t(l)), uint64_t(t));
  pool_->ParallelFor(T_ * in, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      if (CounterUniform(key, DropIndex(t, i, in)) >= p) dx[i] += g[i] * keep_scale;
    }
  });
}

// o and down under tensor parallelism: each rank's product (and LoRA shrink u = x·Aᵀ) covers its
// input columns; the sums over the group are the whole model's (Linear already added s·u·Bᵀ
// with each rank's partial u, which sums to the same).
void TrainingModel::RowParallelSum(int l, LoraTarget t, float* y, float* u) {
  if (!options_.tp.active()) return;
  TpSum(y, T_ * config_.hidden_size);
  if (adapter_ && adapter_->Find(l, t)) TpSum(u, T_ * adapter_->rank());  // the backward pass reads the whole u
}

void TrainingModel::LayerForward(int l, const float* x_in, LayerActs& a, float* x_out, bool dropout) {
  const ModelConfig& c = config_;
  const LayerWeights& lw = weights_.layers[size_t(l)];
  const int64_t T = T_, D = c.hidden_size, N = c.num_heads, H = c.HeadDim(l), K = c.KvHeads(l);
  const int64_t F = c.MlpWidth(l);
  const float eps = c.rms_norm_eps;
  const bool own_kv = !c.IsKvShared(l);  // a KV-shared layer projects only Q
  RmsNormRows(x_in, lw.input_norm.data(), T, D, eps, a.xn.data());
  Linear(l, LoraTarget::kQ, lw.q, a.xn.data(), a.q_raw.data(), a.u[int(LoraTarget::kQ)].data(), dropout);
  if (own_kv) {
    Linear(l, LoraTarget::kK, lw.k, a.xn.data(), a.k_raw.data(), a.u[int(LoraTarget::kK)].data(), dropout);
    if (c.KEqV(l)) {  // V is the raw K projection (LoRA included), before k_norm and RoPE
      std::memcpy(a.v_raw.data(), a.k_raw.data(), sizeof(float) * size_t(T * K * H));
    } else {
      Linear(l, LoraTarget::kV, lw.v, a.xn.data(), a.v_raw.data(), a.u[int(LoraTarget::kV)].data(), dropout);
    }
  }
  const bool v_norm = c.arch == Arch::kGemma4;
  // RoPE on all of a token's q and k heads from the micro-batch's table: the angles once.
  const float* rope = RopeTable(l);
  pool_->ParallelFor(T, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) {
      for (int64_t n = 0; n < N; ++n) {
        RmsNorm(a.q_raw.data() + (t * N + n) * H, lw.q_norm.data(), H, eps, a.q.data() + (t * N + n) * H);
      }
      ApplyRopeCosSin(a.q.data() + t * N * H, N, H, rope + t * H);
      if (!own_kv) continue;
      for (int64_t h = 0; h < K; ++h) {
        const int64_t o = (t * K + h) * H;
        RmsNorm(a.k_raw.data() + o, lw.k_norm.data(), H, eps, a.k.data() + o);
        if (v_norm) RmsNorm(a.v_raw.data() + o, nullptr, H, eps, a.v.data() + o);
        else std::memcpy(a.v.data() + o, a.v_raw.data() + o, sizeof(float) * size_t(H));
      }
      ApplyRopeCosSin(a.k.data() + t * K * H, K, H, rope + t * H);
    }
  });
  Scratch& s = *s_;
  if (c.IsKvSource(l)) {  // kept for the shared layers (a remat recompute rewrites a.k / a.v)
    std::memcpy(s.shared_k[size_t(l)].data(), a.k.data(), sizeof(float) * size_t(T * K * H));
    std::memcpy(s.shared_v[size_t(l)].data(), a.v.data(), sizeof(float) * size_t(T * K * H));
  }
  const int src = c.KvSourceLayer(l);
  AttentionForward(l, a, own_kv ? a.k.data() : s.shared_k[size_t(src)].data(),
                   own_kv ? a.v.data() : s.shared_v[size_t(src)].data());
  Linear(l, LoraTarget::kO, lw.o, a.att.data(), a.o.data(), a.u[int(LoraTarget::kO)].data(), dropout);
  RowParallelSum(l, LoraTarget::kO, a.o.data(), a.u[int(LoraTarget::kO)].data());
  float* tmp = s.dd.data();
  RmsNormRows(a.o.data(), lw.post_attn_norm.data(), T, D, eps, tmp);
  for (int64_t i = 0; i < T * D; ++i) a.x1[size_t(i)] = x_in[i] + tmp[i];
  RmsNormRows(a.x1.data(), lw.pre_ffw_norm.data(), T, D, eps, a.xn2.data());
  Linear(l, LoraTarget::kGate, lw.gate, a.xn2.data(), a.g.data(), a.u[int(LoraTarget::kGate)].data(), dropout);
  Linear(l, LoraTarget::kUp, lw.up, a.xn2.data(), a.up.data(), a.u[int(LoraTarget::kUp)].data(), dropout);
  pool_->ParallelFor(T, [&](int64_t b, int64_t e, int) {
    GeluTanhMul(a.g.data() + b * F, a.up.data() + b * F, (e - b) * F, a.act.data() + b * F);
  });
  Linear(l, LoraTarget::kDown, lw.down, a.act.data(), a.m.data(), a.u[int(LoraTarget::kDown)].data(), dropout);
  RowParallelSum(l, LoraTarget::kDown, a.m.data(), a.u[int(LoraTarget::kDown)].data());
  if (c.enable_moe_block) MoeForward(l, a);  // a.mm = RmsNorm(m) + RmsNorm(experts)
  RmsNormRows(c.enable_moe_block ? a.mm.data() : a.m.data(), lw.post_ffw_norm.data(), T, D, eps, tmp);
  const bool ple = c.hidden_size_per_layer_input > 0;
  float* x2 = ple ? a.x2.data() : x_out;
  for (int64_t i = 0; i < T * D; ++i) x2[i] = a.x1[size_t(i)] + tmp[i];
  if (ple) PleForward(l, a, x2, x_out);
  const float ls = lw.layer_scalar;
  if (ls != 1.f) Scale(x_out, T * D, ls);
}

// dx: the gradient of the layer's output on entry, of its input on return.
void TrainingModel::LayerBackward(int l, const LayerActs& a, float* dx) {
  const ModelConfig& c = config_;
  const LayerWeights& lw = weights_.layers[size_t(l)];
  const int64_t T = T_, D = c.hidden_size, N = c.num_heads, H = c.HeadDim(l), K = c.KvHeads(l);
  const int64_t F = c.MlpWidth(l);
  const float eps = c.rms_norm_eps;
  const float* x_in = s_->layer_inputs[size_t(l)].data();
  const bool own_kv = !c.IsKvShared(l);
  const int src = c.KvSourceLayer(l);
  Scratch& s = *s_;
  auto rows = [&](const std::function<void(int64_t)>& fn) {
    pool_->ParallelFor(T, [&](int64_t b, int64_t e, int) {
      for (int64_t t = b; t < e; ++t) fn(t);
    });
  };

  // x_out = (x2 [+ RmsNorm(ple_o)]) · layer_scalar, x2 = x1 + RmsNorm(m or mm)
  Scale(dx, T * D, lw.layer_scalar);
  if (c.hidden_size_per_layer_input > 0) PleBackward(l, a, dx);  // dx: now the gradient of x2
  const float* ffn_out = c.enable_moe_block ? a.mm.data() : a.m.data();
  rows([&](int64_t t) {
    RmsNormBackward(ffn_out + t * D, lw.post_ffw_norm.data(), D, eps, dx + t * D, s.dd.data() + t * D, false);
  });
  AddNormGrad(lw.post_ffw_norm, ffn_out, dx, T, D);
  const float* dm = s.dd.data();
  if (c.enable_moe_block) {  // s.dd is the gradient of mm; the experts add theirs to dx (x1)
    MoeBackward(l, a, s.dd.data(), s.dm.data(), dx);
    dm = s.dm.data();
  }
  // m = down(gelu(g)·up)
  LinearBackward(l, LoraTarget::kDown, lw.down, a.act.data(), a.u[int(LoraTarget::kDown)].data(), dm, s.df1.data(),
                 false);
  pool_->ParallelFor(T, [&](int64_t b, int64_t e, int) {
    GeluTanhMulBackward(a.g.data() + b * F, a.up.data() + b * F, s.df1.data() + b * F, (e - b) * F,
                        s.df2.data() + b * F, s.df3.data() + b * F);
  });
  LinearBackward(l, LoraTarget::kGate, lw.gate, a.xn2.data(), a.u[int(LoraTarget::kGate)].data(), s.df2.data(),
                 s.dxn.data(), false);
  LinearBackward(l, LoraTarget::kUp, lw.up, a.xn2.data(), a.u[int(LoraTarget::kUp)].data(), s.df3.data(),
                 s.dxn.data(), true);
  TpSum(s.dxn.data(), T * D);  // gate/up are column-parallel: each rank's rows' share of dx
  // x1 gets the residual gradient plus the pre-feed-forward norm's.
  rows([&](int64_t t) {
    RmsNormBackward(a.x1.data() + t * D, lw.pre_ffw_norm.data(), D, eps, s.dxn.data() + t * D, dx + t * D, true);
  });
  AddNormGrad(lw.pre_ffw_norm, a.x1.data(), s.dxn.data(), T, D);
  // x1 = x_in + RmsNorm(o)
  rows([&](int64_t t) {
    RmsNormBackward(a.o.data() + t * D, lw.post_attn_norm.data(), D, eps, dx + t * D, s.dd.data() + t * D, false);
  });
  AddNormGrad(lw.post_attn_norm, a.o.data(), dx, T, D);
  LinearBackward(l, LoraTarget::kO, lw.o, a.att.data(), a.u[int(LoraTarget::kO)].data(), s.dd.data(),
                 s.datt.data(), false);
  AttentionBackward(l, a, own_kv ? a.k.data() : s.shared_k[size_t(src)].data(),
                    own_kv ? a.v.data() : s.shared_v[size_t(src)].data(), s.datt.data(), s.dq.data(), s.dk.data(),
                    s.dv.data());
  const size_t kv = size_t(T * K * H);
  if (!own_kv) {  // the K/V belong to the source layer, whose backward pass comes later
    Add(s.dk.data(), s.shared_dk[size_t(src)].data(), int64_t(kv));
    Add(s.dv.data(), s.shared_dv[size_t(src)].data(), int64_t(kv));
  } else if (c.IsKvSource(l)) {  // what the shared layers sent back
    Add(s.shared_dk[size_t(l)].data(), s.dk.data(), int64_t(kv));
    Add(s.shared_dv[size_t(l)].data(), s.dv.data(), int64_t(kv));
  }
  // Undo RoPE (the inverse rotation) and the q/k/v norms (full fine-tuning: the q/k norms'
  // weight gradients in between, from the gradients of the norms' outputs).
  const bool v_norm = c.arch == Arch::kGemma4;
  const float* rope = RopeTable(l);
  rows([&](int64_t t) {
    // The rotation by −θ: cos(−θ) = cos θ, sin(−θ) = −sin θ (exactly, as libm computes them).
    float inverse[1024];  // every Gemma head dim (≤ 512) on the stack
    const float* cs = rope + t * H;
    std::vector<float> heap;
    float* inv = inverse;
    if (H > 1024) {
      heap.resize(size_t(H));
      inv = heap.data();
    }
    for (int64_t i = 0; i < H / 2; ++i) inv[i] = cs[i], inv[H / 2 + i] = -cs[H / 2 + i];
    ApplyRopeCosSin(s.dq.data() + t * N * H, N, H, inv);
    if (own_kv) ApplyRopeCosSin(s.dk.data() + t * K * H, K, H, inv);
  });
  AddNormGrad(lw.q_norm, a.q_raw.data(), s.dq.data(), T * N, H);
  if (own_kv) AddNormGrad(lw.k_norm, a.k_raw.data(), s.dk.data(), T * K, H);
  rows([&](int64_t t) {
    for (int64_t n = 0; n < N; ++n) {
      float* g = s.dq.data() + (t * N + n) * H;
      RmsNormBackward(a.q_raw.data() + (t * N + n) * H, lw.q_norm.data(), H, eps, g, g, false);
    }
    if (!own_kv) return;
    for (int64_t h = 0; h < K; ++h) {
      const int64_t o = (t * K + h) * H;
      float* gk = s.dk.data() + o;
      RmsNormBackward(a.k_raw.data() + o, lw.k_norm.data(), H, eps, gk, gk, false);
      float* gv = s.dv.data() + o;
      if (v_norm) RmsNormBackward(a.v_raw.data() + o, nullptr, H, eps, gv, gv, false);
      if (c.KEqV(l)) Add(gv, gk, H);  // V was the raw K projection
    }
  });
  LinearBackward(l, LoraTarget::kQ, lw.q, a.xn.data(), a.u[int(LoraTarget::kQ)].data(), s.dq.data(), s.dxn.data(),
                 false);
  if (own_kv) {
    LinearBackward(l, LoraTarget::kK, lw.k, a.xn.data(), a.u[int(LoraTarget::kK)].data(), s.dk.data(), s.dxn.data(),
                   true);
    if (!c.KEqV(l)) {
      LinearBackward(l, LoraTarget::kV, lw.v, a.xn.data(), a.u[int(LoraTarget::kV)].data(), s.dv.data(),
                     s.dxn.data(), true);
    }
  }
  TpSum(s.dxn.data(), T * D);  // q/k/v are column-parallel: each rank's heads' share of dx
  rows([&](int64_t t) {
    RmsNormBackward(x_in + t * D, lw.input_norm.data(), D, eps, s.dxn.data() + t * D, dx + t * D, true);
  });
  AddNormGrad(lw.input_norm, x_in, s.dxn.data(), T, D);
}

}  // namespace gk
