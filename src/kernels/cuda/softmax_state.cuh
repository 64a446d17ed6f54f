// The merge of online-softmax states, for the attention kernels that split a row's positions
// among warps or blocks (paged_attention.cu): each part leaves [m, l, o_0 .. o_{H-1}] (its
// largest score, the sum of e^(s - m) over its scores, its output row unnormalised), and the row
// is out = Σ_i o_i e^(m_i - M) / Σ_i l_i e^(m_i - M) with M = max_i m_i. A part that saw no
// position (m = -inf) weighs 0.
#pragma once

#include <cmath>
#include <cstdint>

namespace gk::cuda {

// The floats of one state with a head dim of H.
__host__ __device__ constexpr int64_t SoftmaxStateFloats(int64_t H) { return H + 2; }

struct MergedSoftmax {
  float M = -INFINITY;  // the largest m
  float L = 0.f;        // Σ_i l_i e^(m_i - M)
};

__device__ inline float PartWeight(float m, float M) { return m == -INFINITY ? 0.f : expf(m - M); }

// M and L of the n states at st, st + stride, ... (kMaxParts > 0: n is at most that, and the
// loops unroll).
template <int kMaxParts = 0>
__device__ inline MergedSoftmax MergeSoftmaxStats(const float* st, int64_t stride, int n) {
  MergedSoftmax r;
#pragma unroll
  for (int i = 0; i < (kMaxParts > 0 ? kMaxParts : n); ++i) {
    if (i < n) r.M = fmaxf(r.M, st[i * stride]);
  }
#pragma unroll
  for (int i = 0; i < (kMaxParts > 0 ? kMaxParts : n); ++i) {
    if (i < n) r.L += st[i * stride + 1] * PartWeight(st[i * stride], r.M);
  }
  return r;
}

// Element d of Σ_i o_i e^(m_i - M): divided by L, element d of the merged output row.
template <int kMaxParts = 0>
__device__ inline float MergedOutput(const float* st, int64_t stride, int n, const MergedSoftmax& s, int d) {
  float acc = 0.f;
#pragma unroll
  for (int i = 0; i < (kMaxParts > 0 ? kMaxParts : n); ++i) {
    if (i < n) acc += st[i * stride + 2 + d] * PartWeight(st[i * stride], s.M);
  }
  return acc;
}

}  // namespace gk::cuda
