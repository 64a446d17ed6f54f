// The attention block: projections, q/k/v norms, RoPE, the KV cache write, and
// softmax(q·k)·v over each query's visible positions (causal; sliding layers also windowed),
// computed by kernels/attention.h over the cache's segments.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attention.h"
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
        float* vv = v + i * H;
        if (v_norm) RmsNorm(vv, nullptr, H, eps, vv);
        kv.Write(pos, head, kk, vv);  // in the cache's dtype (bf16: rounded to nearest even)
      }
    });
  }
  Attend(l, T);
  MatMul(lw.o, s_->att.data(), T, s_->out.data(), *pool_);
}

// One task per (token, kv head): the group of query heads sharing the kv head attends over the
// token's visible positions (one or two ring segments). AttendTasks spreads the tasks over
// the threads, splitting long ones when a decode step has fewer tasks than threads.
void GemmaModel::Attend(int l, int64_t T) {
  const ModelConfig& c = config_;
  const int64_t N = c.num_heads, H = c.HeadDim(l), K = c.KvHeads(l), group = N / K;
  // Gemma 4 folds the temperature into q_norm (scale 1); Gemma 3 scales by its scalar.
  const float scale = c.arch == Arch::kGemma3 ? 1.f / std::sqrt(c.query_pre_attn_scalar) : 1.f;
  const bool full = c.IsFull(l);
  const int source = c.KvSourceLayer(l);  // KV-shared layers read an earlier layer's cache
  // The describer captures one pointer, so its std::function needs no heap allocation.
  struct Context {
    const GemmaModel* model;
    int64_t N, H, K, group;
    float scale;
    bool full;
    int source;
    const float* q;
    float* att;
  };
  const Context ctx{this, N, H, K, group, scale, full, source, s_->q.data(), s_->att.data()};
  AttendTasks(
      T * K,
      [cx = &ctx](int64_t i, AttentionTask& task) {
        const GemmaModel& m = *cx->model;
        const int64_t t = i / cx->K, p = m.token_pos_[size_t(t)];
        const int kh = int(i % cx->K);
        const int64_t lo = cx->full ? 0 : std::max<int64_t>(0, p - m.config_.sliding_window + 1);
        const KvLayer& kv = m.token_cache_[size_t(t)]->layers[size_t(cx->source)];
        const int nseg = kv.Segments(lo, p, kh, task.inline_segments);
        task.segments = {task.inline_segments, size_t(nseg)};
        const int64_t row = (t * cx->N + kh * cx->group) * cx->H;  // query and output rows of the group
        task.query = AttentionQuery{cx->q + row, cx->H, int(cx->group), int(cx->H), cx->scale, kv.dtype};
        task.out = cx->att + row;
        task.out_stride = cx->H;
      },
      *pool_);
}

}  // namespace gk
