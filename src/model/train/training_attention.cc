// Attention of TrainingModel, forward and backward, row by row of the micro-batch (a query
// never sees another row) and per query head in blocks of kBlock queries:
//   forward   S = scale·Q_b·K_spanᵀ, masked (causal; sliding layers also windowed), P =
//             softmax(S), O_b = P·V_span; the log-sum-exp of each query row is kept;
//   backward  P is recomputed from S and the log-sum-exp (FlashAttention-2's scheme: no T×T
//             matrix is stored), dP = dO_b·V_spanᵀ, dS = P∘(dP − rowsum(dO∘O)),
//             dQ_b = scale·dS·K_span, dK_span += scale·dSᵀ·Q_b, dV_span += Pᵀ·dO_b.
// `span` is the keys any query of the block can see. The products are sgemm calls (the sgemm
// library threads them, kernels/gemm.h); the softmax loops run on the pool.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/gemm.h"
#include "model/train/training_buffers.h"
#include "model/train/training_model.h"

namespace gk {
namespace {

constexpr int64_t kBlock = 64;

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
    s.scores.resize(size_t(kBlock * len));
    for (int64_t n = 0; n < N; ++n) {
      const int64_t kh = n / group;
      for (int64_t i0 = 0; i0 < len; i0 += kBlock) {
        const int64_t bq = std::min(kBlock, len - i0);
        const int64_t j0 = full ? 0 : std::max<int64_t>(0, i0 - W + 1), span = i0 + bq - j0;
        const float* q = a.q.data() + ((r0 + i0) * N + n) * H;
        const float* k = k_all + ((r0 + j0) * K + kh) * H;
        const float* v = v_all + ((r0 + j0) * K + kh) * H;
        float* S = s.scores.data();
        Sgemm(false, true, bq, span, H, scale, q, N * H, k, K * H, 0.f, S, span);
        float* lse = a.lse.data() + n * T_ + r0 + i0;
        pool_->ParallelFor(bq, [&](int64_t b, int64_t e, int) {
          for (int64_t i = b; i < e; ++i) {
            const int64_t p = i0 + i, lo = full ? 0 : std::max<int64_t>(0, p - W + 1);
            float* row = S + i * span;
            float mx = -std::numeric_limits<float>::infinity();
            for (int64_t j = lo - j0; j <= p - j0; ++j) mx = std::max(mx, row[j]);
            double sum = 0;
            for (int64_t j = 0; j < span; ++j) {
              const bool visible = j >= lo - j0 && j <= p - j0;
              const float e_ = visible ? std::exp(row[j] - mx) : 0.f;
              row[j] = e_;
              sum += e_;
            }
            const float inv = float(1.0 / sum);
            for (int64_t j = 0; j < span; ++j) row[j] *= inv;
            lse[i] = mx + float(std::log(sum));
          }
        });
        Sgemm(false, false, bq, H, span, 1.f, S, span, v, K * H, 0.f,
              a.att.data() + ((r0 + i0) * N + n) * H, N * H);
      }
    }
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
  std::fill(dk, dk + T_ * K * H, 0.f);
  std::fill(dv, dv + T_ * K * H, 0.f);
  for (size_t r = 0; r + 1 < row_start_.size(); ++r) {
    const int64_t r0 = row_start_[r], len = row_start_[r + 1] - r0;
    s.scores.resize(size_t(kBlock * len));
    s.dprobs.resize(size_t(kBlock * len));
    for (int64_t n = 0; n < N; ++n) {
      const int64_t kh = n / group;
      // delta_i = dO_i · O_i
      pool_->ParallelFor(len, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i) {
          const float* g = datt + ((r0 + i) * N + n) * H;
          const float* o = a.att.data() + ((r0 + i) * N + n) * H;
          double d = 0;
          for (int64_t h = 0; h < H; ++h) d += double(g[h]) * o[h];
          s.delta[size_t(i)] = float(d);
        }
      });
      for (int64_t i0 = 0; i0 < len; i0 += kBlock) {
        const int64_t bq = std::min(kBlock, len - i0);
        const int64_t j0 = full ? 0 : std::max<int64_t>(0, i0 - W + 1), span = i0 + bq - j0;
        const int64_t qrow = ((r0 + i0) * N + n) * H, krow = ((r0 + j0) * K + kh) * H;
        const float* q = a.q.data() + qrow;
        const float* k = k_all + krow;
        const float* v = v_all + krow;
        const float* g = datt + qrow;
        float* P = s.scores.data();
        float* dP = s.dprobs.data();
        Sgemm(false, true, bq, span, H, scale, q, N * H, k, K * H, 0.f, P, span);
        Sgemm(false, true, bq, span, H, 1.f, g, N * H, v, K * H, 0.f, dP, span);
        const float* lse = a.lse.data() + n * T_ + r0 + i0;
        pool_->ParallelFor(bq, [&](int64_t b, int64_t e, int) {
          for (int64_t i = b; i < e; ++i) {
            const int64_t p = i0 + i, lo = full ? 0 : std::max<int64_t>(0, p - W + 1);
            float* pr = P + i * span;
            float* dr = dP + i * span;
            const float d = s.delta[size_t(p)];
            for (int64_t j = 0; j < span; ++j) {
              const bool visible = j >= lo - j0 && j <= p - j0;
              const float pj = visible ? std::exp(pr[j] - lse[i]) : 0.f;
              pr[j] = pj;
              dr[j] = pj * (dr[j] - d) * scale;  // dS, with the score scale folded in
            }
          }
        });
        Sgemm(false, false, bq, H, span, 1.f, dP, span, k, K * H, 0.f, dq + qrow, N * H);
        Sgemm(true, false, span, H, bq, 1.f, dP, span, q, N * H, 1.f, dk + krow, K * H);
        Sgemm(true, false, span, H, bq, 1.f, P, span, g, N * H, 1.f, dv + krow, K * H);
      }
    }
  }
}

}  // namespace gk
