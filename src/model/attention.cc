// The attention block: projections, q/k/v norms, RoPE, the KV cache write, and
// softmax(q·k)·v over each query's visible positions (causal; sliding layers also windowed).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/forward_scratch.h"
#include "model/gemma_model.h"

namespace gk {

void GemmaModel::AttentionBlock(int l, int64_t T) {
  const ModelConfig& c = config_;
  const LayerWeights& lw = weights_.layers[size_t(l)];
  const int64_t N = c.num_heads, H = c.HeadDim(l), K = c.KvHeads(l);
  const float eps = c.rms_norm_eps;
  const float* inv_freq = c.IsFull(l) ? inv_freq_full_.data() : inv_freq_sliding_.data();
  const float* xn = s_->xn.data();

  float* q = s_->q.data();  // (T, N, H)
  MatMul(lw.q, xn, T, q, *pool_);
  pool_->ParallelFor(T * N, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      RmsNorm(q + i * H, lw.q_norm.data(), H, eps, q + i * H);
      ApplyRope(q + i * H, H, inv_freq, token_pos_[size_t(i / N)]);
    }
  });

  if (!c.IsKvShared(l)) {
    float* k = s_->k.data();  // (T, K, H)
    float* v = s_->v.data();
    MatMul(lw.k, xn, T, k, *pool_);
    if (lw.v.empty()) {  // K=V layer: V is the raw K projection, taken before k_norm and RoPE
      std::memcpy(v, k, sizeof(float) * size_t(T * K * H));
    } else {
      MatMul(lw.v, xn, T, v, *pool_);
    }
    const bool v_norm = c.arch == Arch::kGemma4;
    pool_->ParallelFor(T * K, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) {
        const int64_t pos = token_pos_[size_t(i / K)];
        KvLayer& kv = token_cache_[size_t(i / K)]->layers[size_t(l)];
        const int head = int(i % K);
        float* kk = k + i * H;
        RmsNorm(kk, lw.k_norm.data(), H, eps, kk);
        ApplyRope(kk, H, inv_freq, pos);
        std::memcpy(kv.K(pos, head), kk, sizeof(float) * size_t(H));
        float* vv = v + i * H;
        if (v_norm) RmsNorm(vv, nullptr, H, eps, vv);
        std::memcpy(kv.V(pos, head), vv, sizeof(float) * size_t(H));
      }
    });
  }
  Attend(l, T);
  MatMul(lw.o, s_->att.data(), T, s_->out.data(), *pool_);
}

void GemmaModel::Attend(int l, int64_t T) {
  const ModelConfig& c = config_;
  const int64_t N = c.num_heads, H = c.HeadDim(l), K = c.KvHeads(l), group = N / K;
  // Gemma 4 folds the temperature into q_norm (scale 1); Gemma 3 scales by its scalar.
  const float scale = c.arch == Arch::kGemma3 ? 1.f / std::sqrt(c.query_pre_attn_scalar) : 1.f;
  const bool full = c.IsFull(l);
  const int source = c.KvSourceLayer(l);  // KV-shared layers read an earlier layer's cache
  const float* q = s_->q.data();
  float* att = s_->att.data();
  const int64_t tasks = T * N;
  const int64_t grain = std::max<int64_t>(1, tasks / (4 * pool_->size()));
  pool_->ParallelForDynamic(tasks, grain, [&](int64_t b, int64_t e, int thread) {
    float* scores = s_->scores[size_t(thread)].data();
    for (int64_t i = b; i < e; ++i) {
      const int64_t p = token_pos_[size_t(i / N)];
      const KvLayer& kv = token_cache_[size_t(i / N)]->layers[size_t(source)];
      const int kh = int((i % N) / group);
      const int64_t lo = full ? 0 : std::max<int64_t>(0, p - c.sliding_window + 1);
      const float* qv = q + i * H;
      for (int64_t j = lo; j <= p; ++j) scores[j - lo] = Dot(qv, kv.K(j, kh), H) * scale;
      SoftmaxInPlace(scores, p - lo + 1);
      float* o = att + i * H;
      std::memset(o, 0, sizeof(float) * size_t(H));
      for (int64_t j = lo; j <= p; ++j) Axpy(scores[j - lo], kv.V(j, kh), o, H);
    }
  });
}

}  // namespace gk
