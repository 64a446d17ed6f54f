// The attention block: projections (with the batch's LoRA deltas), q/k/v norms, RoPE, the KV
// cache write (a sequence's KvCache or a block of the paged pool), and
// softmax(q·k)·v over each query's visible positions (causal; sliding layers also windowed),
// computed by kernels/attention.h over the cache's segments.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/decoder_constants.h"
#include "model/forward_scratch.h"
#include "model/gemma_model.h"
#include "model/paged_kv.h"

namespace gk {

void GemmaModel::AttentionBlock(int l, int64_t T) {
  const ModelConfig& c = config_;
  const LayerWeights& lw = weights_.layers[size_t(l)];
  const int64_t N = c.num_heads, H = c.HeadDim(l), K = c.KvHeads(l);
  const float eps = c.rms_norm_eps;
  const float* rope = s_->rope[size_t(rope_.slot[size_t(l)])].data();  // (T, H): RunDecoder
  const float* xn = s_->xn.data();

  float* q = s_->q.data();  // (T, N, H)
  float* k = s_->k.data();  // (T, K, H)
  float* v = s_->v.data();
  const bool own_kv = !c.IsKvShared(l);
  // Q, K and V read the same normed input: one parallel loop for the three (kernels/matmul.h).
  const WeightProduct qkv[] = {{&lw.q, q}, {&lw.k, k}, {&lw.v, v}};
  MatMulShared(std::span(qkv, own_kv ? (lw.v.empty() ? 2 : 3) : 1), xn, T, *pool_);
  if (!own_kv) ApplyLora(l, {{LoraTarget::kQ, q}}, xn);
  else if (lw.v.empty()) ApplyLora(l, {{LoraTarget::kQ, q}, {LoraTarget::kK, k}}, xn);
  else ApplyLora(l, {{LoraTarget::kQ, q}, {LoraTarget::kK, k}, {LoraTarget::kV, v}}, xn);
  pool_->ParallelFor(T, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) {
      float* qt = q + t * N * H;
      for (int64_t h = 0; h < N; ++h) RmsNorm(qt + h * H, lw.q_norm.data(), H, eps, qt + h * H);
      ApplyRopeCosSin(qt, N, H, rope + t * H);
    }
  });

  if (own_kv) {
    if (lw.v.empty()) {  // K=V layer: V is the raw K projection, taken before k_norm and RoPE
      std::memcpy(v, k, sizeof(float) * size_t(T * K * H));
    }
    const bool v_norm = c.arch == Arch::kGemma4;
    pool_->ParallelFor(T, [&](int64_t b, int64_t e, int) {
      for (int64_t t = b; t < e; ++t) {
        float* kt = k + t * K * H;
        for (int64_t h = 0; h < K; ++h) RmsNorm(kt + h * H, lw.k_norm.data(), H, eps, kt + h * H);
        ApplyRopeCosSin(kt, K, H, rope + t * H);
        for (int64_t h = 0; h < K; ++h) {
          float* vv = v + (t * K + h) * H;
          if (v_norm) RmsNorm(vv, nullptr, H, eps, vv);
          StoreKv(l, t, int(h), kt + h * H, vv);
        }
      }
    });
  }
  Attend(l, T);
  MatMul(lw.o, s_->att.data(), T, s_->out.data(), *pool_);
  ApplyLora(l, {{LoraTarget::kO, s_->out.data()}}, s_->att.data());
  TpSum(s_->out.data(), T * c.hidden_size);  // o is row-parallel: each rank's heads' share
}

// Writes token t's K and V rows of `head` for layer l where its position lives: its sequence's
// ring (KvCache) or its block of the paged pool, in that cache's dtype.
void GemmaModel::StoreKv(int l, int64_t t, int head, const float* key, const float* value) {
  const int64_t pos = token_pos_[size_t(t)];
  if (paged_pool_ == nullptr) {
    token_cache_[size_t(t)]->layers[size_t(l)].Write(pos, head, key, value);
    return;
  }
  const PagedSequence& seq = *paged_spans_[size_t(token_span_[size_t(t)])].seq;
  const int64_t bs = paged_pool_->block_size();
  const int32_t block = seq.blocks[int(LayerKvGroup(config_, l))][size_t(pos / bs)];
  paged_pool_->Write(l, block, int(pos % bs), head, key, value);
}

// Paged batches: every item's visible blocks of layer `source`, one segment per (block, kv
// head), laid out per item and head as TokenSegments reads them.
void GemmaModel::BuildPagedSegments(int source) {
  const int g = int(LayerKvGroup(config_, source));
  const int K = config_.KvHeads(source);
  for (const PagedSpan& sp : paged_spans_) {
    KvSegment* out = paged_segments_.data() + sp.seg_base[g] * K;
    const int32_t* table = sp.seq->blocks[g].data() + sp.first_block[g];
    for (int h = 0; h < K; ++h) {
      for (int64_t b = 0; b < sp.num_blocks[g]; ++b) *out++ = paged_pool_->Segment(source, table[b], h);
    }
  }
}

// Token t's visible positions of kv head `kv_head` in layer `source`'s cache as task segments
// (and range); returns the cache's dtype. A ring gives one or two segments; a paged pool the
// blocks from the window's first to the token's own, the range trimming the first and last.
DType GemmaModel::TokenSegments(int source, int64_t t, int kv_head, AttentionTask& task) const {
  const bool full = config_.IsFull(source);
  const int64_t p = token_pos_[size_t(t)], lo = FirstVisible(full, p);
  if (paged_pool_ == nullptr) {
    const KvLayer& kv = token_cache_[size_t(t)]->layers[size_t(source)];
    task.segments = {task.inline_segments, size_t(kv.Segments(lo, p, kv_head, task.inline_segments))};
    return kv.dtype;
  }
  const int g = int(LayerKvGroup(config_, source));
  const PagedSpan& sp = paged_spans_[size_t(token_span_[size_t(t)])];
  const int64_t bs = paged_pool_->block_size(), b0 = lo / bs, b1 = p / bs;
  const KvSegment* first = paged_segments_.data() + sp.seg_base[g] * config_.KvHeads(source) +
                           kv_head * sp.num_blocks[g] + (b0 - sp.first_block[g]);
  task.segments = {first, size_t(b1 - b0 + 1)};
  task.begin = lo - b0 * bs;
  task.end = task.begin + (p - lo + 1);
  return paged_pool_->dtype();
}

// One task per (token, kv head): the group of query heads sharing the kv head attends over the
// token's visible positions (ring segments or paged blocks). AttendTasks spreads the tasks over
// the threads, splitting long ones when a decode step has fewer tasks than threads.
void GemmaModel::Attend(int l, int64_t T) {
  const ModelConfig& c = config_;
  const int64_t N = c.num_heads, H = c.HeadDim(l), K = c.KvHeads(l), group = N / K;
  const float scale = AttentionScale(c);
  const int source = c.KvSourceLayer(l);  // KV-shared layers read an earlier layer's cache
  if (paged_pool_ != nullptr) BuildPagedSegments(source);
  // The describer captures one pointer, so its std::function needs no heap allocation.
  struct Context {
    const GemmaModel* model;
    int64_t N, H, K, group;
    float scale;
    int source;
    const float* q;
    float* att;
  };
  const Context ctx{this, N, H, K, group, scale, source, s_->q.data(), s_->att.data()};
  AttendTasks(
      T * K,
      [cx = &ctx](int64_t i, AttentionTask& task) {
        const int64_t t = i / cx->K;
        const int kh = int(i % cx->K);
        const DType kv_dtype = cx->model->TokenSegments(cx->source, t, kh, task);
        const int64_t row = (t * cx->N + kh * cx->group) * cx->H;  // query and output rows of the group
        task.query = AttentionQuery{cx->q + row, cx->H, int(cx->group), int(cx->H), cx->scale, kv_dtype};
        task.out = cx->att + row;
        task.out_stride = cx->H;
      },
      *pool_);
}

}  // namespace gk
