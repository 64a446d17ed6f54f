#include "kernels/cuda/paged_attention.h"

#include <cmath>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_memory.h"
#include "kernels/cuda/kv_convert.cuh"

namespace gk::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kPerLane = kMaxHeadDim / 32;  // head-dim elements each lane holds

// Grid (T, N), kWarps warps. Lane l of a warp holds elements l, l + 32, ... of q and of the
// output row; warp w takes positions lo + w, lo + w + kWarps, ...
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

  // Merge the warps' states: out = Σ_w o_w e^(m_w - M) / Σ_w l_w e^(m_w - M).
  __shared__ float sm[kWarps], sl[kWarps];
  __shared__ float so[kWarps][kMaxHeadDim];
  if (lane == 0) {
    sm[warp] = m;
    sl[warp] = l;
  }
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) {
    const int d = i * 32 + lane;
    if (d < H) so[warp][d] = o[i];
  }
  __syncthreads();
  float M = -INFINITY;
  for (int w = 0; w < kWarps; ++w) M = fmaxf(M, sm[w]);
  float L = 0.f, weight[kWarps];
  for (int w = 0; w < kWarps; ++w) {
    weight[w] = sm[w] == -INFINITY ? 0.f : expf(sm[w] - M);
    L += sl[w] * weight[w];
  }
  const float inv = 1.f / L;
  float* out = a.out + (t * a.num_heads + head) * H;
  for (int d = threadIdx.x; d < H; d += blockDim.x) {
    float acc = 0.f;
    for (int w = 0; w < kWarps; ++w) acc += so[w][d] * weight[w];
    out[d] = acc * inv;
  }
}

}  // namespace

Status PagedAttention(const PagedAttentionArgs& a, cudaStream_t stream) {
  if (a.T == 0) return Status::Ok();
  if (a.head_dim < 1 || a.head_dim > kMaxHeadDim) {
    return Status::Error(StrCat("the GPU's attention takes head dims up to ", kMaxHeadDim, ", got ", a.head_dim));
  }
  if (a.kv_heads < 1 || a.num_heads % a.kv_heads != 0) {
    return Status::Error(StrCat(a.num_heads, " query heads do not share ", a.kv_heads, " kv heads evenly"));
  }
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
