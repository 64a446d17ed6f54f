#include "kernels/cuda/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/bf16_staging.cuh"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_memory.h"
#include "kernels/cuda/kv_convert.cuh"
#include "kernels/cuda/softmax_state.cuh"

namespace gk::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kPerLane = kMaxHeadDim / 32;  // head-dim elements each lane holds

// One output element, and its bf16 terms where o_proj's product reads them.
__device__ inline void Output(const PagedAttentionArgs& a, int64_t i, float v) {
  a.out[i] = v;
  if (a.out_staged.hi) StageBf16(a.out_staged, i, v);
}

// Groups of more than 16 query heads per KV head. Grid (T, N), kWarps warps. Lane l of a warp
// holds elements l, l + 32, ... of q and of the output row; warp w takes positions lo + w,
// lo + w + kWarps, ...
template <KvType kType>
__global__ void __launch_bounds__(kWarps * 32) PagedAttentionKernel(PagedAttentionArgs a) {
  using E = KvElem<kType>;
  const int64_t t = a.rows ? a.rows[blockIdx.x] : blockIdx.x;
  const int head = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int H = a.head_dim, kv_head = head / (a.num_heads / a.kv_heads);
  const int32_t p = a.tokens.pos[t];
  const int32_t lo = a.window > 0 ? max(0, p - a.window + 1) : 0;
  const int32_t* table = a.tokens.tables + a.tokens.table_offset[t];
  const float* q = a.q + (t * a.num_heads + head) * H;

  float qr[kPerLane], o[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = i * 32 + lane;
    qr[i] = d < H ? q[d] * a.scale : 0.f;
    o[i] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  const auto* kp = reinterpret_cast<const typename E::Storage*>(a.k_pool);
  const auto* vp = reinterpret_cast<const typename E::Storage*>(a.v_pool);
  for (int32_t j = lo + warp; j <= p; j += kWarps) {
    const int32_t block = table[j / a.block_size];
    const int64_t row = ((int64_t(block) * a.kv_heads + kv_head) * a.block_size + j % a.block_size) * H;
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int d = i * 32 + lane;
      if (d < H) s += qr[i] * E::Load(kp[row + d]);
    }
    s = WarpSum(s);
    const float m_new = fmaxf(m, s);
    const float c = expf(m - m_new);  // 0 while m is -inf
    const float e = expf(s - m_new);
    l = l * c + e;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int d = i * 32 + lane;
      if (d < H) o[i] = o[i] * c + e * E::Load(vp[row + d]);
    }
    m = m_new;
  }

  // Merge the warps' states (softmax_state.cuh).
  constexpr int64_t kState = SoftmaxStateFloats(kMaxHeadDim);
  __shared__ float st[kWarps * kState];
  float* mine = st + warp * kState;
  if (lane == 0) {
    mine[0] = m;
    mine[1] = l;
  }
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = i * 32 + lane;
    if (d < H) mine[2 + d] = o[i];
  }
  __syncthreads();
  const MergedSoftmax merged = MergeSoftmaxStats<kWarps>(st, kState, kWarps);
  const float inv = 1.f / merged.L;
  const int64_t at = (t * a.num_heads + head) * H;
  for (int d = threadIdx.x; d < H; d += blockDim.x) {
    Output(a, at + d, MergedOutput<kWarps>(st, kState, kWarps, merged, d) * inv);
  }
}

constexpr int kTile = 16;  // positions staged in shared memory at a time
constexpr int kMaxGroup = 4 * kWarps;

// The tile's K and V rows [t0, t0 + n) of KV head kh into shared memory, all threads: 16-byte
// loads where rows are whole 16-byte chunks and the pools 16-byte aligned (rows of 256 or 512
// bf16, f16, fp8 or f32 elements), else element by element.
template <class S>
__device__ inline void StageTile(const PagedAttentionArgs& a, const S* kp, const S* vp, const int32_t* table, int kh,
                                 int32_t t0, int n, S* ks, S* vs) {
  const int H = a.head_dim;
  constexpr int kVec = 16 / int(sizeof(S));
  const bool vec = H % kVec == 0 && reinterpret_cast<uintptr_t>(kp) % 16 == 0 && reinterpret_cast<uintptr_t>(vp) % 16 == 0;
  const int per_row = vec ? H / kVec : H;
  for (int idx = threadIdx.x; idx < n * per_row; idx += blockDim.x) {
    const int r = idx / per_row, c = idx - r * per_row;
    const int32_t j = t0 + r;
    const int32_t block = table[j / a.block_size];
    const int64_t row = ((int64_t(block) * a.kv_heads + kh) * a.block_size + j % a.block_size) * H;
    if (vec) {
      reinterpret_cast<uint4*>(ks + r * H)[c] = reinterpret_cast<const uint4*>(kp + row)[c];
      reinterpret_cast<uint4*>(vs + r * H)[c] = reinterpret_cast<const uint4*>(vp + row)[c];
    } else {
      ks[r * H + c] = kp[row + c];
      vs[r * H + c] = vp[row + c];
    }
  }
}

// Grid (T, K, splits), kWarps warps. The group's g query heads are spread over hw = min(g, kWarps)
// warps: warp w holds heads w % hw, w % hw + hw, ... (kHeads of them at most), lane l elements
// l, l + 32, ... of each head's q and output row. The pg = kWarps / hw warps that hold the same
// heads share out each tile's positions (warp w takes rows w / hw, w / hw + pg, ...), two at a
// time so that their dot products overlap; their softmax states are merged at the end in shared
// memory. (g = 2, the 31B shape's sliding layers: two warps per head, none idle.)
template <KvType kType, int kHeads, int kLane>
__global__ void __launch_bounds__(kWarps * 32) GroupAttentionKernel(PagedAttentionArgs a) {
  using E = KvElem<kType>;
  using S = typename E::Storage;
  extern __shared__ __align__(16) unsigned char smem[];
  const int H = a.head_dim, g = a.num_heads / a.kv_heads;
  S* ks = reinterpret_cast<S*>(smem);
  S* vs = ks + kTile * H;
  const int64_t t = a.rows ? a.rows[blockIdx.x] : blockIdx.x;
  const int kh = blockIdx.y, split = blockIdx.z, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int hw = min(g, kWarps), pg = kWarps / hw;
  const int slot = warp % hw, prow = warp / hw;  // prow >= pg: an idle warp (kWarps % hw != 0)
  const int32_t p = a.tokens.pos[t];
  const int32_t lo = a.window > 0 ? max(0, p - a.window + 1) : 0;
  const int32_t per = a.split_positions > 0 ? a.split_positions : (p - lo + 1 + a.splits - 1) / a.splits;
  const int32_t begin = lo + split * per, end = min(p + 1, begin + per);  // [begin, end)
  const int32_t* table = a.tokens.tables + a.tokens.table_offset[t];

  float qr[kHeads][kLane], o[kHeads][kLane], m[kHeads], l[kHeads];
#pragma unroll
  for (int u = 0; u < kHeads; ++u) {
    const int j = slot + u * hw;
    const float* q = a.q + (t * a.num_heads + kh * g + min(j, g - 1)) * H;
#pragma unroll
    for (int i = 0; i < kLane; ++i) {
      const int d = i * 32 + lane;
      qr[u][i] = j < g && d < H ? q[d] * a.scale : 0.f;
      o[u][i] = 0.f;
    }
    m[u] = -INFINITY;
    l[u] = 0.f;
  }
  const auto* kp = reinterpret_cast<const S*>(a.k_pool);
  const auto* vp = reinterpret_cast<const S*>(a.v_pool);
  for (int32_t t0 = begin; t0 < end; t0 += kTile) {
    const int n = min(kTile, end - t0);
    StageTile(a, kp, vp, table, kh, t0, n, ks, vs);
    __syncthreads();
#pragma unroll
    for (int u = 0; u < kHeads; ++u) {
      if (prow >= pg || slot + u * hw >= g) continue;
      for (int r = prow; r < n; r += 2 * pg) {  // rows r and r2 = r + pg (when there is one)
        const int r2 = r + pg;
        const bool two = r2 < n;
        float s1 = 0.f, s2 = 0.f;
#pragma unroll
        for (int i = 0; i < kLane; ++i) {
          const int d = i * 32 + lane;
          if (d < H) {
            s1 += qr[u][i] * E::Load(ks[r * H + d]);
            if (two) s2 += qr[u][i] * E::Load(ks[r2 * H + d]);
          }
        }
        s1 = WarpSum(s1);
        s2 = WarpSum(s2);
        const float m_new = fmaxf(m[u], two ? fmaxf(s1, s2) : s1);
        const float c = expf(m[u] - m_new);  // 0 while m is -inf
        const float e1 = expf(s1 - m_new), e2 = two ? expf(s2 - m_new) : 0.f;
        l[u] = l[u] * c + e1 + e2;
#pragma unroll
        for (int i = 0; i < kLane; ++i) {
          const int d = i * 32 + lane;
          if (d < H) o[u][i] = o[u][i] * c + e1 * E::Load(vs[r * H + d]) + (two ? e2 * E::Load(vs[r2 * H + d]) : 0.f);
        }
        m[u] = m_new;
      }
    }
    __syncthreads();
  }
  if (pg > 1) {  // hw = g heads, one per warp (kHeads used: 1): merge the pg warps of each head
    float* st = reinterpret_cast<float*>(smem);  // a state per warp (softmax_state.cuh): the tile is no longer read
    const int64_t state = SoftmaxStateFloats(H);
    if (prow < pg) {
      float* mine = st + warp * state;
      if (lane == 0) {
        mine[0] = m[0];
        mine[1] = l[0];
      }
#pragma unroll
      for (int i = 0; i < kLane; ++i) {
        const int d = i * 32 + lane;
        if (d < H) mine[2 + d] = o[0][i];
      }
    }
    __syncthreads();
    if (prow != 0) return;  // (no barrier follows)
    const float* head_states = st + slot * state;  // warps slot, slot + hw, ...
    const MergedSoftmax merged = MergeSoftmaxStats<kWarps>(head_states, hw * state, pg);
#pragma unroll
    for (int i = 0; i < kLane; ++i) {
      const int d = i * 32 + lane;
      if (d < H) o[0][i] = MergedOutput<kWarps>(head_states, hw * state, pg, merged, d);
    }
    m[0] = merged.M;
    l[0] = merged.L;
  } else if (prow >= pg) {
    return;
  }
#pragma unroll
  for (int u = 0; u < kHeads; ++u) {
    const int j = slot + u * hw;
    if (j >= g) continue;
    const int h = kh * g + j;
    if (a.splits == 1) {
      const int64_t at = (t * a.num_heads + h) * H;
      const float inv = 1.f / l[u];
#pragma unroll
      for (int i = 0; i < kLane; ++i) {
        const int d = i * 32 + lane;
        if (d < H) Output(a, at + d, o[u][i] * inv);
      }
    } else {  // [m, l, o] of this split (an empty split: -inf, 0, zeros)
      float* part = a.workspace + ((int64_t(blockIdx.x) * a.num_heads + h) * a.splits + split) * SoftmaxStateFloats(H);
      if (lane == 0) {
        part[0] = m[u];
        part[1] = l[u];
      }
#pragma unroll
      for (int i = 0; i < kLane; ++i) {
        const int d = i * 32 + lane;
        if (d < H) part[2 + d] = o[u][i];
      }
    }
  }
}

// Grid (T, N): the row's output from the splits' states (softmax_state.cuh).
__global__ void MergeSplitsKernel(PagedAttentionArgs a) {
  const int64_t t = a.rows ? a.rows[blockIdx.x] : blockIdx.x;
  const int h = blockIdx.y, H = a.head_dim;
  const int64_t state = SoftmaxStateFloats(H);
  const float* part = a.workspace + (int64_t(blockIdx.x) * a.num_heads + h) * a.splits * state;
  const MergedSoftmax merged = MergeSoftmaxStats(part, state, a.splits);
  const int64_t at = (t * a.num_heads + h) * H;
  const float inv = 1.f / merged.L;
  for (int d = threadIdx.x; d < H; d += blockDim.x) {
    Output(a, at + d, MergedOutput(part, state, a.splits, merged, d) * inv);
  }
}

template <KvType kType, int kHeads, int kLane>
Status LaunchGroup(const PagedAttentionArgs& a, cudaStream_t stream) {
  // The tile of K and V; after the last, the warps' softmax states (which fit in it).
  const size_t smem = std::max(2 * size_t(kTile) * size_t(a.head_dim) * sizeof(typename KvElem<kType>::Storage),
                               size_t(kWarps) * size_t(SoftmaxStateFloats(a.head_dim)) * sizeof(float));
  auto kernel = GroupAttentionKernel<kType, kHeads, kLane>;
  if (smem > 48 * 1024) {  // over the default: opt in (f32 caches with 512-wide heads: 64 KiB)
    GK_RETURN_IF_ERROR(Check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
                             "cudaFuncSetAttribute"));
  }
  kernel<<<dim3{unsigned(a.T), unsigned(a.kv_heads), unsigned(a.splits)}, kWarps * 32, smem, stream>>>(a);
  return CheckLaunch("GroupAttentionKernel");
}

template <KvType kType>
Status LaunchGroupFor(const PagedAttentionArgs& a, cudaStream_t stream) {
  const int g = a.num_heads / a.kv_heads, heads = (g + kWarps - 1) / kWarps;
  if (a.head_dim <= 256) {
    if (heads == 1) return LaunchGroup<kType, 1, 8>(a, stream);
    if (heads == 2) return LaunchGroup<kType, 2, 8>(a, stream);
    return LaunchGroup<kType, 4, 8>(a, stream);
  }
  if (heads == 1) return LaunchGroup<kType, 1, 16>(a, stream);
  if (heads == 2) return LaunchGroup<kType, 2, 16>(a, stream);
  return LaunchGroup<kType, 4, 16>(a, stream);
}

}  // namespace

int PagedAttentionSplits(int64_t rows, int kv_heads, int64_t max_positions, int multiprocessors) {
  const int64_t blocks = rows * kv_heads, want = 2 * int64_t(multiprocessors);
  if (blocks >= want) return 1;
  const int64_t by_blocks = (want + blocks - 1) / blocks, by_length = (max_positions + 127) / 128;
  return int(std::max<int64_t>(1, std::min<int64_t>({by_blocks, by_length, 64})));
}

int BatchInvariantSplitPositions(int64_t longest_possible) {
  const int64_t per = std::max<int64_t>(256, (longest_possible + 15) / 16);
  return int((per + kTile - 1) / kTile * kTile);
}

int BatchInvariantSplits(int64_t max_positions, int split_positions) {
  return int(std::max<int64_t>(1, (max_positions + split_positions - 1) / split_positions));
}

Status PagedAttention(const PagedAttentionArgs& a, cudaStream_t stream) {
  if (a.T == 0) return Status::Ok();
  if (a.head_dim < 1 || a.head_dim > kMaxHeadDim) {
    return Status::Error(StrCat("the GPU's attention takes head dims up to ", kMaxHeadDim, ", got ", a.head_dim));
  }
  if (a.kv_heads < 1 || a.num_heads % a.kv_heads != 0) {
    return Status::Error(StrCat(a.num_heads, " query heads do not share ", a.kv_heads, " kv heads evenly"));
  }
  if (a.splits < 1 || (a.splits > 1 && a.workspace == nullptr)) {
    return Status::Error(StrCat("attention split into ", a.splits, " ranges needs a workspace"));
  }
  if (a.num_heads / a.kv_heads <= kMaxGroup) {
    auto launch = [&]() -> Status {
      switch (a.dtype) {
        case DType::kF32: return LaunchGroupFor<KvType::kF32>(a, stream);
        case DType::kF16: return LaunchGroupFor<KvType::kF16>(a, stream);
        case DType::kBF16: return LaunchGroupFor<KvType::kBF16>(a, stream);
        case DType::kFp8E4m3: return LaunchGroupFor<KvType::kE4M3>(a, stream);
        case DType::kFp8E5m2: return LaunchGroupFor<KvType::kE5M2>(a, stream);
        default: return Status::Error(StrCat("paged KV cache dtype ", DTypeName(a.dtype), " is not supported on the GPU"));
      }
    };
    GK_RETURN_IF_ERROR(launch());
    if (a.splits == 1) return Status::Ok();
    MergeSplitsKernel<<<dim3{unsigned(a.T), unsigned(a.num_heads)}, 128, 0, stream>>>(a);
    return CheckLaunch("MergeSplitsKernel");
  }
  // Groups of more than kMaxGroup heads: a block per query head (splits unused).
  const dim3 grid{unsigned(a.T), unsigned(a.num_heads)};
  switch (a.dtype) {
    case DType::kF32: PagedAttentionKernel<KvType::kF32><<<grid, kWarps * 32, 0, stream>>>(a); break;
    case DType::kF16: PagedAttentionKernel<KvType::kF16><<<grid, kWarps * 32, 0, stream>>>(a); break;
    case DType::kBF16: PagedAttentionKernel<KvType::kBF16><<<grid, kWarps * 32, 0, stream>>>(a); break;
    case DType::kFp8E4m3: PagedAttentionKernel<KvType::kE4M3><<<grid, kWarps * 32, 0, stream>>>(a); break;
    case DType::kFp8E5m2: PagedAttentionKernel<KvType::kE5M2><<<grid, kWarps * 32, 0, stream>>>(a); break;
    default: return Status::Error(StrCat("paged KV cache dtype ", DTypeName(a.dtype), " is not supported on the GPU"));
  }
  return CheckLaunch("PagedAttentionKernel");
}

}  // namespace gk::cuda
