// Attention of TrainingModel, forward and backward, row by row of the micro-batch (a query
// never sees another row) and per query head in blocks of kBlock queries:
//   forward   S = scale·Q_b·K_spanᵀ, masked (causal; sliding layers also windowed), P =
//             softmax(S), O_b = P·V_span; the log-sum-exp of each query row is kept;
//   backward  P is recomputed from S and the log-sum-exp (FlashAttention-2's scheme: no T×T
//             matrix is stored), dP = dO_b·V_spanᵀ, dS = P∘(dP − rowsum(dO∘O)),
//             dQ_b = scale·dS·K_span, dK_span += scale·dSᵀ·Q_b, dV_span += Pᵀ·dO_b.
// `span` is the keys any query of the block can see. The heads run side by side on the pool,
// each thread's products one-threaded (SgemmOneThread): a head's blocks are small products
// (64 queries × span × head dim) that one sgemm split over every thread ran at about half the
// rate (docs/PERF.md). The backward pass's heads that share a KV head add their dK/dV into
// a buffer per task, summed in task order afterwards, so the sums do not depend on which thread
// ran which task.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/gemm.h"
#include "kernels/train_ops.h"
#include "model/train/training_buffers.h"
#include "model/train/training_model.h"

namespace gk {
namespace {

constexpr int64_t kBlock = 64;

// The query heads of KV head kh that task `part` of `parts` takes: [first, last).
void PartHeads(int64_t kh, int64_t group, int64_t part, int64_t parts, int64_t* first, int64_t* last) {
  *first = kh * group + group * part / parts;
  *last = kh * group + group * (part + 1) / parts;
}

}  // namespace

void TrainingModel::AttentionForward(int l, LayerActs& a, const float* k_all, const float* v_all) {
  const ModelConfig& c = config_;
  const int64_t N = c.num_heads, H = c.HeadDim(l), K = c.KvHeads(l), group = N / K;
  const bool full = c.IsFull(l);
  const int64_t W = c.sliding_window;
  const float scale = attn_scale_;
  Scratch& s = *s_;
  for (size_t r = 0; r + 1 < row_start_.size(); ++r) {
    const int64_t r0 = row_start_[r], len = row_start_[r + 1] - r0;
    s.scores.resize(size_t(pool_->size()) * size_t(kBlock * len));
    pool_->ParallelForDynamic(N, 1, [&](int64_t n0, int64_t n1, int thread) {
      float* S = s.scores.data() + size_t(thread) * size_t(kBlock * len);
      for (int64_t n = n0; n < n1; ++n) {
        const int64_t kh = n / group;
        for (int64_t i0 = 0; i0 < len; i0 += kBlock) {
          const int64_t bq = std::min(kBlock, len - i0);
          const int64_t j0 = full ? 0 : std::max<int64_t>(0, i0 - W + 1), span = i0 + bq - j0;
          const float* q = a.q.data() + ((r0 + i0) * N + n) * H;
          const float* k = k_all + ((r0 + j0) * K + kh) * H;
          const float* v = v_all + ((r0 + j0) * K + kh) * H;
          SgemmOneThread(false, true, bq, span, H, scale, q, N * H, k, K * H, 0.f, S, span);
          float* lse = a.lse.data() + n * T_ + r0 + i0;
          for (int64_t i = 0; i < bq; ++i) {
            const int64_t p = i0 + i, lo = full ? 0 : std::max<int64_t>(0, p - W + 1);
            float* row = S + i * span;
            const int64_t vis0 = lo - j0, vis1 = p - j0 + 1;  // the visible keys [vis0, vis1)
            float mx = -std::numeric_limits<float>::infinity();
            for (int64_t j = vis0; j < vis1; ++j) mx = std::max(mx, row[j]);
            // row ← exp(row − mx) over the visible keys (vectorised; cap 0: no softcap factor), 0 elsewhere.
            const double sum = SumExpMinusAndGradRow(row + vis0, vis1 - vis0, mx, 0.f);
            std::fill(row, row + vis0, 0.f);
            std::fill(row + vis1, row + span, 0.f);
            const float inv = float(1.0 / sum);
            for (int64_t j = vis0; j < vis1; ++j) row[j] *= inv;
            lse[i] = mx + float(std::log(sum));
          }
          SgemmOneThread(false, false, bq, H, span, 1.f, S, span, v, K * H, 0.f,
                         a.att.data() + ((r0 + i0) * N + n) * H, N * H);
        }
      }
    });
  }
}

void TrainingModel::AttentionBackward(int l, const LayerActs& a, const float* k_all, const float* v_all,
                                      const float* datt, float* dq, float* dk, float* dv) {
  const ModelConfig& c = config_;
  const int64_t N = c.num_heads, H = c.HeadDim(l), K = c.KvHeads(l), group = N / K;
  const bool full = c.IsFull(l);
  const int64_t W = c.sliding_window;
  const float scale = attn_scale_;
  Scratch& s = *s_;
  // Tasks: each KV head's query heads in `parts` parts, enough tasks for every thread. With one
  // part a task owns its KV head's dK/dV rows; with more, each part adds into its own buffer.
  const int64_t parts = std::min<int64_t>(group, std::max<int64_t>(1, (pool_->size() + K - 1) / K));
  const int64_t tasks = K * parts;
  std::fill(dk, dk + T_ * K * H, 0.f);
  std::fill(dv, dv + T_ * K * H, 0.f);
  for (size_t r = 0; r + 1 < row_start_.size(); ++r) {
    const int64_t r0 = row_start_[r], len = row_start_[r + 1] - r0;
    const size_t per_thread = size_t(kBlock * len);
    s.scores.resize(size_t(pool_->size()) * per_thread);
    s.dprobs.resize(size_t(pool_->size()) * per_thread);
    s.delta.resize(size_t(pool_->size()) * size_t(len));
    const size_t part_size = size_t(len * H);
    if (parts > 1) {
      s.dk_parts.assign(size_t(tasks) * part_size, 0.f);
      s.dv_parts.assign(size_t(tasks) * part_size, 0.f);
    }
    pool_->ParallelForDynamic(tasks, 1, [&](int64_t t0, int64_t t1, int thread) {
      float* P = s.scores.data() + size_t(thread) * per_thread;
      float* dP = s.dprobs.data() + size_t(thread) * per_thread;
      float* delta = s.delta.data() + size_t(thread) * size_t(len);
      for (int64_t task = t0; task < t1; ++task) {
        const int64_t kh = task / parts, part = task % parts;
        // Where this task's dK/dV go: the rows of KV head kh, or its own buffer.
        float* dk_out = parts > 1 ? s.dk_parts.data() + size_t(task) * part_size : dk + (r0 * K + kh) * H;
        float* dv_out = parts > 1 ? s.dv_parts.data() + size_t(task) * part_size : dv + (r0 * K + kh) * H;
        const int64_t ld_out = parts > 1 ? H : K * H;
        int64_t n_first = 0, n_last = 0;
        PartHeads(kh, group, part, parts, &n_first, &n_last);
        for (int64_t n = n_first; n < n_last; ++n) {
          for (int64_t i = 0; i < len; ++i) {  // delta_i = dO_i · O_i
            const float* g = datt + ((r0 + i) * N + n) * H;
            const float* o = a.att.data() + ((r0 + i) * N + n) * H;
            double d = 0;
            for (int64_t h = 0; h < H; ++h) d += double(g[h]) * o[h];
            delta[i] = float(d);
          }
          for (int64_t i0 = 0; i0 < len; i0 += kBlock) {
            const int64_t bq = std::min(kBlock, len - i0);
            const int64_t j0 = full ? 0 : std::max<int64_t>(0, i0 - W + 1), span = i0 + bq - j0;
            const int64_t qrow = ((r0 + i0) * N + n) * H, krow = ((r0 + j0) * K + kh) * H;
            const float* q = a.q.data() + qrow;
            const float* k = k_all + krow;
            const float* v = v_all + krow;
            const float* g = datt + qrow;
            SgemmOneThread(false, true, bq, span, H, scale, q, N * H, k, K * H, 0.f, P, span);
            SgemmOneThread(false, true, bq, span, H, 1.f, g, N * H, v, K * H, 0.f, dP, span);
            const float* lse = a.lse.data() + n * T_ + r0 + i0;
            for (int64_t i = 0; i < bq; ++i) {
              const int64_t p = i0 + i, lo = full ? 0 : std::max<int64_t>(0, p - W + 1);
              float* pr = P + i * span;
              float* dr = dP + i * span;
              const float d = delta[p];
              const int64_t vis0 = lo - j0, vis1 = p - j0 + 1;
              SumExpMinusAndGradRow(pr + vis0, vis1 - vis0, lse[i], 0.f);  // P = exp(S − lse), vectorised
              std::fill(pr, pr + vis0, 0.f);
              std::fill(pr + vis1, pr + span, 0.f);
              for (int64_t j = 0; j < span; ++j) dr[j] = pr[j] * (dr[j] - d) * scale;  // dS, the score scale folded in
            }
            SgemmOneThread(false, false, bq, H, span, 1.f, dP, span, k, K * H, 0.f, dq + qrow, N * H);
            SgemmOneThread(true, false, span, H, bq, 1.f, dP, span, q, N * H, 1.f, dk_out + j0 * ld_out, ld_out);
            SgemmOneThread(true, false, span, H, bq, 1.f, P, span, g, N * H, 1.f, dv_out + j0 * ld_out, ld_out);
          }
        }
      }
    });
    if (parts == 1) continue;
    // The parts' sums into the KV heads' rows, in task order.
    pool_->ParallelFor(len, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) {
        for (int64_t task = 0; task < tasks; ++task) {
          const int64_t kh = task / parts;
          const float* pk = s.dk_parts.data() + size_t(task) * part_size + size_t(i * H);
          const float* pv = s.dv_parts.data() + size_t(task) * part_size + size_t(i * H);
          float* ok = dk + ((r0 + i) * K + kh) * H;
          float* ov = dv + ((r0 + i) * K + kh) * H;
          for (int64_t h = 0; h < H; ++h) ok[h] += pk[h], ov[h] += pv[h];
        }
      }
    });
  }
}

}  // namespace gk
