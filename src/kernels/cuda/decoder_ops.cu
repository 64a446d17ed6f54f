#include "kernels/cuda/decoder_ops.h"

#include <algorithm>

#include "kernels/cuda/bf16_staging.cuh"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_memory.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/kv_convert.cuh"

namespace gk::cuda {
namespace {

constexpr int kThreads = 256;

int Blocks(int64_t n) { return int(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, 65535)); }

__global__ void ScaleKernel(float* x, int64_t n, float s) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) x[i] *= s;
}

__global__ void AddScaleKernel(float* x, const float* y, int64_t n, float s) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    x[i] = (x[i] + y[i]) * s;
  }
}

constexpr int kMaxExperts = 1024;

// One block per token: softmax over the E logits in shared memory, then k rounds of "the largest
// left, the lower index among equal ones", as the CPU's partial_sort; the k renormalised.
__global__ void RouteTopKKernel(const float* logits, int E, int k, const float* per_expert_scale, int32_t* expert,
                                float* weight) {
  __shared__ float p[kMaxExperts];
  const float* row = logits + blockIdx.x * int64_t(E);
  float m = -INFINITY;
  for (int e = threadIdx.x; e < E; e += blockDim.x) m = fmaxf(m, row[e]);
  m = BlockMax(m);
  float sum = 0.f;
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    p[e] = expf(row[e] - m);
    sum += p[e];
  }
  const float inv = 1.f / BlockSum(sum);
  for (int e = threadIdx.x; e < E; e += blockDim.x) p[e] *= inv;
  __syncthreads();
  float total = 0.f;  // the k chosen probabilities' sum (every thread keeps it)
  for (int j = 0; j < k; ++j) {
    float bv = -1.f;
    int64_t bi = E;
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
      if (p[e] > bv) {  // increasing e: ties keep the lower index
        bv = p[e];
        bi = e;
      }
    }
    const int64_t e = BlockArgMax(bv, bi, E);
    total += p[e];
    if (threadIdx.x == 0) {
      expert[blockIdx.x * int64_t(k) + j] = int32_t(e);
      weight[blockIdx.x * int64_t(k) + j] = p[e];
    }
    __syncthreads();
    if (threadIdx.x == 0) p[e] = -2.f;  // taken
    __syncthreads();
  }
  if (threadIdx.x < k) {
    const int64_t at = blockIdx.x * int64_t(k) + threadIdx.x;
    weight[at] = weight[at] / total * per_expert_scale[expert[at]];
  }
}

__global__ void ScatterAddKernel(const float* x, int64_t D, const int32_t* rows, const float* weight, float* y) {
  const float* src = x + blockIdx.x * D;
  float* dst = y + int64_t(rows[blockIdx.x]) * D;
  const float w = weight[blockIdx.x];
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) dst[i] += w * src[i];
}

// One block per token: every (head, pair) of its rows.
// kInverse: the rotation by −θ (RoPE's backward pass), sin(−θ) = −sin θ.
template <bool kInverse>
__global__ void RopeKernel(float* x, int64_t heads, int64_t H, const float* cos_sin) {
  const int64_t half = H / 2;
  float* xt = x + blockIdx.x * heads * H;
  const float* c = cos_sin + blockIdx.x * H;
  const float* s = c + half;
  for (int64_t i = threadIdx.x; i < heads * half; i += blockDim.x) {
    const int64_t h = i / half, j = i % half;
    float* r = xt + h * H;
    const float a = r[j], b = r[j + half], sn = kInverse ? -s[j] : s[j];
    r[j] = a * c[j] - b * sn;
    r[j + half] = b * c[j] + a * sn;
  }
}

// One block per row: each thread's best (value, lowest index), then the block's.
__global__ void ArgMaxKernel(const float* x, int64_t n, int32_t* out) {
  const float* row = x + blockIdx.x * n;
  float best = -INFINITY;
  int64_t at = n;  // none yet
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {  // increasing i: ties keep the first
    if (at == n || row[i] > best) {
      best = row[i];
      at = i;
    }
  }
  const int64_t r = BlockArgMax(best, at, n);
  if (threadIdx.x == 0) out[blockIdx.x] = int32_t(r == n ? 0 : r);
}

__global__ void GatherRowsKernel(const float* x, int64_t D, const int32_t* rows, float* out) {
  const float* src = x + int64_t(rows[blockIdx.x]) * D;
  float* dst = out + blockIdx.x * D;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) dst[i] = src[i];
}

template <bool kBf16>
__global__ void EmbedKernel(const void* table, int64_t rows, int64_t D, const int32_t* tokens, float scale,
                            int32_t fallback, float* out) {
  int32_t id = tokens[blockIdx.x];
  if (id >= rows) id = fallback;
  float* o = out + blockIdx.x * D;
  const bool valid = id >= 0 && id < rows;
  const int64_t base = valid ? int64_t(id) * D : 0;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    float v = 0.f;
    if (valid) {
      v = kBf16 ? __uint_as_float(uint32_t(static_cast<const uint16_t*>(table)[base + i]) << 16)
                : static_cast<const float*>(table)[base + i];
    }
    o[i] = v * scale;
  }
}

__global__ void SplitToBf16Kernel(const float* x, int64_t n, Bf16Staging out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    StageBf16(out, i, x[i]);
  }
}

// Grid (T, heads + kv_heads), one block per row of H: blocks y < heads take token t's q head
// y, q_norm's RMSNorm then the rotation, as RmsNormKernel and RopeKernel compute them (the row
// read once; in place where q == q_out); blocks past them take its K head, K after k_norm and
// RoPE and V after its norm, into the pool slot its block table names (v null: V is k's row as
// it comes).
template <KvType kType>
__global__ void QkvNormKernel(QkvNormWrite a) {
  const int64_t t = blockIdx.x;
  const int half = a.H / 2;
  const float* c = a.cos_sin + t * a.H;
  const float* s = c + half;
  if (int(blockIdx.y) < a.heads) {
    const float* r = a.q + t * a.q_ld + int64_t(blockIdx.y) * a.H;
    float* o = a.q_out + (t * a.heads + blockIdx.y) * a.H;
    const float* w = a.q_norm;
    const float inv = RowInvRms(r, a.H, a.eps);  // (its barriers: the row is read before any thread writes it)
    for (int j = threadIdx.x; j < half; j += blockDim.x) {  // (in place: a thread writes what it read)
      const float x0 = w ? r[j] * inv * w[j] : r[j] * inv;
      const float x1 = w ? r[j + half] * inv * w[j + half] : r[j + half] * inv;
      o[j] = x0 * c[j] - x1 * s[j];
      o[j + half] = x1 * c[j] + x0 * s[j];
    }
    return;
  }
  using E = KvElem<kType>;
  const int head = int(blockIdx.y) - a.heads;
  const int32_t pos = a.tokens.pos[t];
  const int32_t block = a.tokens.tables[a.tokens.table_offset[t] + pos / a.block_size];
  const int64_t row = ((int64_t(block) * a.kv_heads + head) * a.block_size + pos % a.block_size) * a.H;
  auto* kd = reinterpret_cast<typename E::Storage*>(a.k_pool) + row;
  auto* vd = reinterpret_cast<typename E::Storage*>(a.v_pool) + row;
  const float* ks = a.k + t * a.kv_ld + int64_t(head) * a.H;
  const float* vs = a.v ? a.v + t * a.kv_ld + int64_t(head) * a.H : ks;
  const float k_inv = RowInvRms(ks, a.H, a.eps);
  const float v_inv = a.v_norm ? RowInvRms(vs, a.H, a.eps) : 1.f;
  const float* w = a.k_norm;
  for (int j = threadIdx.x; j < half; j += blockDim.x) {
    const float x0 = w ? ks[j] * k_inv * w[j] : ks[j] * k_inv;
    const float x1 = w ? ks[j + half] * k_inv * w[j + half] : ks[j + half] * k_inv;
    kd[j] = E::Store(x0 * c[j] - x1 * s[j]);
    kd[j + half] = E::Store(x1 * c[j] + x0 * s[j]);
  }
  for (int i = threadIdx.x; i < a.H; i += blockDim.x) vd[i] = E::Store(a.v_norm ? vs[i] * v_inv : vs[i]);
}

}  // namespace

Status ScaleRows(float* x, int64_t n, float s, cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  ScaleKernel<<<Blocks(n), kThreads, 0, stream>>>(x, n, s);
  return CheckLaunch("ScaleKernel");
}

Status AddScale(float* x, const float* y, int64_t n, float s, cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  AddScaleKernel<<<Blocks(n), kThreads, 0, stream>>>(x, y, n, s);
  return CheckLaunch("AddScaleKernel");
}

Status RouteTopK(const float* logits, int64_t T, int E, int k, const float* per_expert_scale, int32_t* expert,
                 float* weight, cudaStream_t stream) {
  if (T == 0) return Status::Ok();
  if (E > kMaxExperts || k > E || k < 1 || k > kThreads) {
    return Status::Error(StrCat("the GPU routes up to ", kMaxExperts, " experts, top-k at most that; got ", E, ", ", k));
  }
  RouteTopKKernel<<<unsigned(T), kThreads, 0, stream>>>(logits, E, k, per_expert_scale, expert, weight);
  return CheckLaunch("RouteTopKKernel");
}

Status ScatterAddRows(const float* x, int64_t D, const int32_t* rows, const float* weight, int64_t n, float* y,
                      cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  ScatterAddKernel<<<unsigned(n), kThreads, 0, stream>>>(x, D, rows, weight, y);
  return CheckLaunch("ScatterAddKernel");
}

Status RopeRows(float* x, int64_t T, int64_t heads, int64_t H, const float* cos_sin, cudaStream_t stream, bool inverse) {
  if (T == 0) return Status::Ok();
  if (inverse) RopeKernel<true><<<unsigned(T), kThreads, 0, stream>>>(x, heads, H, cos_sin);
  else RopeKernel<false><<<unsigned(T), kThreads, 0, stream>>>(x, heads, H, cos_sin);
  return CheckLaunch("RopeKernel");
}

Status ArgMaxRows(const float* x, int64_t rows, int64_t n, int32_t* out, cudaStream_t stream) {
  if (rows == 0) return Status::Ok();
  ArgMaxKernel<<<unsigned(rows), kThreads, 0, stream>>>(x, n, out);
  return CheckLaunch("ArgMaxKernel");
}

Status GatherRows(const float* x, int64_t D, const int32_t* rows, int64_t n_rows, float* out, cudaStream_t stream) {
  if (n_rows == 0) return Status::Ok();
  GatherRowsKernel<<<unsigned(n_rows), kThreads, 0, stream>>>(x, D, rows, out);
  return CheckLaunch("GatherRowsKernel");
}

Status EmbedRows(const void* table, DType dtype, int64_t rows, int64_t D, const int32_t* tokens, int64_t T, float scale,
                 int32_t fallback, float* out, cudaStream_t stream) {
  if (T == 0) return Status::Ok();
  if (dtype == DType::kBF16) EmbedKernel<true><<<unsigned(T), kThreads, 0, stream>>>(table, rows, D, tokens, scale, fallback, out);
  else if (dtype == DType::kF32) EmbedKernel<false><<<unsigned(T), kThreads, 0, stream>>>(table, rows, D, tokens, scale, fallback, out);
  else return Status::Error(StrCat("the GPU embeds bf16 or f32 tables, not ", DTypeName(dtype)));
  return CheckLaunch("EmbedKernel");
}

Status SplitToBf16(const float* x, int64_t n, uint16_t* hi, uint16_t* lo, uint16_t* lo2, cudaStream_t stream) {
  if (n == 0) return Status::Ok();
  SplitToBf16Kernel<<<Blocks(n), kThreads, 0, stream>>>(x, n, Bf16Staging{hi, lo, lo2});
  return CheckLaunch("SplitToBf16Kernel");
}

Status NormRopeAndKvWrite(const QkvNormWrite& a, cudaStream_t stream) {
  if (a.T == 0 || a.heads + a.kv_heads == 0) return Status::Ok();
  if ((a.heads > 0 && (a.q_ld < int64_t(a.heads) * a.H || (a.q == a.q_out && a.q_ld != int64_t(a.heads) * a.H))) ||
      (a.kv_heads > 0 && a.kv_ld < int64_t(a.kv_heads) * a.H)) {
    return Status::Error(StrCat("NormRopeAndKvWrite: row strides of ", a.q_ld, " and ", a.kv_ld, " for ", a.heads,
                                " and ", a.kv_heads, " heads of ", a.H));
  }
  const dim3 grid{unsigned(a.T), unsigned(a.heads + a.kv_heads)};
  switch (a.kv_heads == 0 ? DType::kF32 : a.dtype) {  // (q alone: any instance does)
    case DType::kF32: QkvNormKernel<KvType::kF32><<<grid, kThreads, 0, stream>>>(a); break;
    case DType::kF16: QkvNormKernel<KvType::kF16><<<grid, kThreads, 0, stream>>>(a); break;
    case DType::kBF16: QkvNormKernel<KvType::kBF16><<<grid, kThreads, 0, stream>>>(a); break;
    case DType::kFp8E4m3: QkvNormKernel<KvType::kE4M3><<<grid, kThreads, 0, stream>>>(a); break;
    case DType::kFp8E5m2: QkvNormKernel<KvType::kE5M2><<<grid, kThreads, 0, stream>>>(a); break;
    default: return Status::Error(StrCat("paged KV cache dtype ", DTypeName(a.dtype), " is not supported on the GPU"));
  }
  return CheckLaunch("QkvNormKernel");
}

}  // namespace gk::cuda
