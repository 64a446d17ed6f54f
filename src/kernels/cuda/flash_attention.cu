// The fused prefill attention of flash_attention.h. Per block: 32 query rows of one head, four
// warps. Each tile of 32 positions: K and V rows from the pool into shared memory (converted to
// the operand type), S = Q·Kᵀ as four 16×16 WMMA tiles (one per warp), the online softmax with
// four lanes per row, then O = α·O + P·V with each warp owning a quarter of O's 16-column tiles.
// O stays in shared memory in f32 (32 × 512 floats would not fit a warp's registers), and is
// divided by the row sums at the end. Correct first: no double buffering of the K/V tiles yet.
#include "kernels/cuda/flash_attention.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include "kernels/cuda/kv_convert.cuh"

namespace gk::cuda {
namespace {

using namespace nvcuda;

constexpr int kRows = 32, kCols = 32, kWarps = 4, kThreads = kWarps * 32;
constexpr int kLanesPerRow = kThreads / kRows, kColsPerLane = kCols / kLanesPerRow;  // 4 lanes, 8 columns each
static_assert(kLanesPerRow == 4 && kColsPerLane == 8);

// Shared memory, in bytes from the start. Row strides are padded (16 bytes) against bank
// conflicts; every tile WMMA loads starts on 32 bytes and every stride is a multiple of 16 bytes,
// as WMMA requires.
struct Layout {
  int ld_op, ld_s, ld_p, ld_o;  // row strides, elements: Q/K/V, S, P, O
  size_t q, k, v, s, p, o, stats, bytes;
  __host__ __device__ explicit Layout(int H)
      : ld_op(H + 8), ld_s(kCols + 4), ld_p(kCols + 8), ld_o(H + 4) {
    q = 0;
    k = q + size_t(kRows) * size_t(ld_op) * 2;
    v = k + size_t(kCols) * size_t(ld_op) * 2;
    s = v + size_t(kCols) * size_t(ld_op) * 2;
    p = s + size_t(kRows) * size_t(ld_s) * 4;
    o = p + size_t(kRows) * size_t(ld_p) * 2;
    stats = o + size_t(kRows) * size_t(ld_o) * 4;
    bytes = stats + 3 * kRows * 4;
  }
};

// Grid (⌈T/32⌉, N), kThreads threads, Layout(H).bytes of dynamic shared memory.
template <KvType kPool, class Op>
__global__ void __launch_bounds__(kThreads) FlashPrefillKernel(const PrefillAttentionArgs a) {
  extern __shared__ __align__(128) unsigned char smem[];
  using E = KvElem<kPool>;
  const int H = a.head_dim, N = a.num_heads, kh = int(blockIdx.y) / (N / a.kv_heads), h = int(blockIdx.y);
  const Layout L(H);
  Op* sq = reinterpret_cast<Op*>(smem + L.q);
  Op* sk = reinterpret_cast<Op*>(smem + L.k);
  Op* sv = reinterpret_cast<Op*>(smem + L.v);
  float* ss = reinterpret_cast<float*>(smem + L.s);
  Op* sp = reinterpret_cast<Op*>(smem + L.p);
  float* so = reinterpret_cast<float*>(smem + L.o);
  float* m_row = reinterpret_cast<float*>(smem + L.stats);  // running max of each row's scores
  float* l_row = m_row + kRows;                              // running sum of exp(score - max)
  float* alpha = l_row + kRows;                              // this tile's rescaling of O
  const int tid = int(threadIdx.x), warp = tid / 32;
  const int64_t i0 = int64_t(blockIdx.x) * kRows;
  const int rows = int(a.T - i0 < kRows ? a.T - i0 : kRows);

  for (int idx = tid; idx < kRows * H; idx += kThreads) {  // the scaled queries, and O = 0
    const int r = idx / H, d = idx % H;
    const float x = r < rows ? a.q[((a.t0 + i0 + r) * N + h) * H + d] * a.scale : 0.f;
    sq[r * L.ld_op + d] = ToOperand<Op>(x);
    so[r * L.ld_o + d] = 0.f;
  }
  if (tid < kRows) {
    m_row[tid] = -INFINITY;
    l_row[tid] = 0.f;
  }
  // Positions: the block's rows are first + i0 .. last; the earliest any of them sees is lo.
  const int64_t first = a.first + i0, last = first + rows - 1;
  const int64_t lo = a.window > 0 && first - a.window + 1 > 0 ? first - a.window + 1 : 0;
  const auto* k_pool = reinterpret_cast<const typename E::Storage*>(a.k_pool);
  const auto* v_pool = reinterpret_cast<const typename E::Storage*>(a.v_pool);

  for (int64_t j0 = lo; j0 <= last; j0 += kCols) {
    __syncthreads();  // the last tile's readers are done with sk, sv and sp
    for (int idx = tid; idx < kCols * H; idx += kThreads) {
      const int c = idx / H, d = idx % H;
      const int64_t j = j0 + c;
      float kx = 0.f, vx = 0.f;
      if (j <= last) {  // past it the table may end; those columns are masked anyway
        const int32_t block = a.table[j / a.block_size];
        const int64_t row = ((int64_t(block) * a.kv_heads + kh) * a.block_size + j % a.block_size) * H;
        kx = E::Load(k_pool[row + d]);
        vx = E::Load(v_pool[row + d]);
      }
      sk[c * L.ld_op + d] = ToOperand<Op>(kx);
      sv[c * L.ld_op + d] = ToOperand<Op>(vx);
    }
    __syncthreads();
    {  // S = Q·Kᵀ: warp w computes the 16×16 tile (w / 2, w % 2)
      const int rg = warp / 2, cg = warp % 2;
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fragment<wmma::matrix_a, 16, 16, 16, Op, wmma::row_major> fq;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, Op, wmma::col_major> fk;  // Kᵀ: K's rows are its columns
      wmma::fill_fragment(acc, 0.f);
      for (int k = 0; k < H; k += 16) {
        wmma::load_matrix_sync(fq, sq + rg * 16 * L.ld_op + k, unsigned(L.ld_op));
        wmma::load_matrix_sync(fk, sk + cg * 16 * L.ld_op + k, unsigned(L.ld_op));
        wmma::mma_sync(acc, fq, fk, acc);
      }
      wmma::store_matrix_sync(ss + rg * 16 * L.ld_s + cg * 16, acc, unsigned(L.ld_s), wmma::mem_row_major);
    }
    __syncthreads();
    {  // The online softmax: four neighbouring lanes share a row, eight columns each.
      const int r = tid / kLanesPerRow, part = tid % kLanesPerRow;
      const int64_t p = first + r;
      float s[kColsPerLane];
      float mx = -INFINITY;
#pragma unroll
      for (int u = 0; u < kColsPerLane; ++u) {
        const int c = part * kColsPerLane + u;
        const int64_t j = j0 + c;
        const bool visible = r < rows && j <= p && (a.window == 0 || j > p - a.window);
        s[u] = visible ? ss[r * L.ld_s + c] : -INFINITY;
        mx = fmaxf(mx, s[u]);
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_old = m_row[r], m_new = fmaxf(m_old, mx);
      float sum = 0.f;
#pragma unroll
      for (int u = 0; u < kColsPerLane; ++u) {
        const float e = m_new == -INFINITY ? 0.f : expf(s[u] - m_new);  // masked: exp(-inf) = 0
        sp[r * L.ld_p + part * kColsPerLane + u] = ToOperand<Op>(e);
        sum += e;
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const float al = m_new == -INFINITY ? 1.f : expf(m_old - m_new);
      __syncwarp();  // the row's four lanes have read m_row[r]
      if (part == 0) {
        m_row[r] = m_new;
        l_row[r] = l_row[r] * al + sum;
        alpha[r] = al;
      }
    }
    __syncthreads();
    for (int idx = tid; idx < kRows * H; idx += kThreads) so[(idx / H) * L.ld_o + idx % H] *= alpha[idx / H];
    __syncthreads();
    // O += P·V: warp w owns O's 16-column tiles w, w + 4, ... of both row halves.
    for (int cg = warp; cg < H / 16; cg += kWarps) {
      for (int rg = 0; rg < kRows / 16; ++rg) {
        float* o_tile = so + rg * 16 * L.ld_o + cg * 16;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fragment<wmma::matrix_a, 16, 16, 16, Op, wmma::row_major> fp;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, Op, wmma::row_major> fv;
        wmma::load_matrix_sync(acc, o_tile, unsigned(L.ld_o), wmma::mem_row_major);
#pragma unroll
        for (int k = 0; k < kCols; k += 16) {
          wmma::load_matrix_sync(fp, sp + rg * 16 * L.ld_p + k, unsigned(L.ld_p));
          wmma::load_matrix_sync(fv, sv + k * L.ld_op + cg * 16, unsigned(L.ld_op));
          wmma::mma_sync(acc, fp, fv, acc);
        }
        wmma::store_matrix_sync(o_tile, acc, unsigned(L.ld_o), wmma::mem_row_major);
      }
    }
  }
  __syncthreads();
  for (int idx = tid; idx < rows * H; idx += kThreads) {
    const int r = idx / H, d = idx % H;
    a.out[((a.t0 + i0 + r) * N + h) * H + d] = so[r * L.ld_o + d] / l_row[r];
  }
}

template <KvType kPool, class Op>
Status Launch(const PrefillAttentionArgs& a, cudaStream_t stream) {
  const Layout L(a.head_dim);
  GK_RETURN_IF_ERROR(Check(cudaFuncSetAttribute(FlashPrefillKernel<kPool, Op>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                int(L.bytes)), "FlashPrefillKernel's shared memory"));
  const dim3 grid{unsigned((a.T + kRows - 1) / kRows), unsigned(a.num_heads)};
  FlashPrefillKernel<kPool, Op><<<grid, kThreads, L.bytes, stream>>>(a);
  return CheckLaunch("FlashPrefillKernel");
}

}  // namespace

bool FlashPrefillSupports(DType pool_dtype, int head_dim) {
  const bool sixteen_bit = pool_dtype == DType::kBF16 || pool_dtype == DType::kF16 || pool_dtype == DType::kFp8E4m3 ||
                           pool_dtype == DType::kFp8E5m2;
  return sixteen_bit && head_dim > 0 && head_dim % 16 == 0 && head_dim <= 512;
}

Status FlashPrefillAttention(const PrefillAttentionArgs& a, cudaStream_t stream) {
  if (a.T == 0) return Status::Ok();
  if (!FlashPrefillSupports(a.dtype, a.head_dim)) {
    return Status::Error(StrCat("the fused prefill attention takes bf16, f16 or fp8 caches and head dims that are ",
                                "multiples of 16 up to 512, not ", DTypeName(a.dtype), " with ", a.head_dim));
  }
  if (a.kv_heads < 1 || a.num_heads % a.kv_heads != 0) {
    return Status::Error(StrCat(a.num_heads, " query heads cannot share ", a.kv_heads, " KV heads"));
  }
  switch (a.dtype) {
    case DType::kBF16: return Launch<KvType::kBF16, __nv_bfloat16>(a, stream);
    case DType::kF16: return Launch<KvType::kF16, __half>(a, stream);
    case DType::kFp8E4m3: return Launch<KvType::kE4M3, __half>(a, stream);
    default: return Launch<KvType::kE5M2, __half>(a, stream);
  }
}

}  // namespace gk::cuda
