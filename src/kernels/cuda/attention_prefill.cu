#include "kernels/cuda/attention_prefill.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/head_layout.cuh"
#include "kernels/cuda/kv_convert.cuh"

namespace gk::cuda {
namespace {

constexpr int kThreads = 256;

// Grid (ctx, kv_heads): position lo + blockIdx.x of one KV head into kc (Kh, ctx, H) and, transposed, vt (Kh, H, ctx)
// with rows ld apart.
template <KvType kPool, class Op>
__global__ void GatherKvKernel(const std::byte* k_pool, const std::byte* v_pool, const int32_t* table, int64_t lo,
                               int64_t ctx, int64_t ld, int kv_heads, int H, int block_size, Op* kc, Op* vt) {
  using E = KvElem<kPool>;
  const int64_t c = blockIdx.x, j = lo + c;
  const int kh = blockIdx.y;
  const int32_t block = table[j / block_size];
  const int64_t row = ((int64_t(block) * kv_heads + kh) * block_size + j % block_size) * H;
  const auto* ks = reinterpret_cast<const typename E::Storage*>(k_pool) + row;
  const auto* vs = reinterpret_cast<const typename E::Storage*>(v_pool) + row;
  for (int d = threadIdx.x; d < H; d += blockDim.x) {
    kc[(kh * ctx + c) * H + d] = ToOperand<Op>(E::Load(ks[d]));
    vt[(int64_t(kh) * H + d) * ld + c] = ToOperand<Op>(E::Load(vs[d]));
  }
}

// One block per row of S (N·Tq rows of ctx, ld apart; row h·Tq + t): the softmax over the row's
// visible columns (positions lo + c from the token's first visible one through its own), zeros elsewhere.
template <class Op>
__global__ void MaskedSoftmaxKernel(const float* S, int64_t Tq, int64_t ctx, int64_t ld, int64_t p0, int64_t lo, int window,
                                    Op* P) {
  const int64_t r = blockIdx.x, t = r % Tq, p = p0 + t;
  const int64_t first = window > 0 ? max(int64_t(0), p - window + 1) : 0;
  const int64_t c0 = max(first - lo, int64_t(0)), c1 = p - lo;
  const float* s = S + r * ld;
  Op* out = P + r * ld;
  float m = -INFINITY;
  for (int64_t c = c0 + threadIdx.x; c <= c1; c += blockDim.x) m = fmaxf(m, s[c]);
  m = BlockMax(m);
  float sum = 0.f;
  for (int64_t c = c0 + threadIdx.x; c <= c1; c += blockDim.x) sum += expf(s[c] - m);
  const float inv = 1.f / BlockSum(sum);
  for (int64_t c = threadIdx.x; c < ctx; c += blockDim.x) {
    out[c] = ToOperand<Op>(c >= c0 && c <= c1 ? expf(s[c] - m) * inv : 0.f);
  }
}

uint64_t Align(uint64_t n) { return (n + 255) / 256 * 256; }

template <class Op>
constexpr DType OpDType() {
  if constexpr (std::is_same_v<Op, float>) return DType::kF32;
  else if constexpr (std::is_same_v<Op, __half>) return DType::kF16;
  else return DType::kBF16;
}

// y_b (M × N) = x_b (M × K) · w_b (N × K)ᵀ for each KV head b, every matrix row-major with
// rows ldx / ldw / ldy apart and the batch's matrices back to back.
BatchedProduct PerKvHead(DType dtype, int64_t M, int64_t N, int64_t K, const void* x, int64_t ldx, const void* w,
                         int64_t ldw, float* y, int64_t ldy, int kv_heads) {
  BatchedProduct p;
  p.dtype = dtype;
  p.M = M;
  p.N = N;
  p.K = K;
  p.x = x;
  p.ldx = ldx;
  p.stride_x = M * ldx;
  p.w = w;
  p.ldw = ldw;
  p.stride_w = N * ldw;
  p.y = y;
  p.ldy = ldy;
  p.stride_y = M * ldy;
  p.batch = kv_heads;
  return p;
}

template <KvType kPool, class Op>
Status RunTyped(const PrefillAttentionArgs& a, GemmRunner& gemm, DeviceBuffer<std::byte>& ws, cudaStream_t stream) {
  const int N = a.num_heads, Kh = a.kv_heads, H = a.head_dim, g = N / Kh;
  const uint64_t es = sizeof(Op);
  // Score rows are padded to a multiple of 8 elements: every KV head's matrices start 16-byte
  // aligned, as cuBLASLt's algorithms were chosen to assume (gemm.cc).
  auto pad = [](int64_t ctx) { return (ctx + 7) / 8 * 8; };
  const int64_t widest = pad(a.first + a.T);  // no tile's context is longer
  const int64_t tile = std::clamp<int64_t>(int64_t(kPrefillScoreBytes / (uint64_t(N) * uint64_t(widest) * (4 + es))), 16,
                                           kPrefillTileRows);
  for (int64_t s = 0; s < a.T; s += tile) {
    const int64_t Tq = std::min(tile, a.T - s), p0 = a.first + s, p1 = p0 + Tq - 1;
    const int64_t lo = a.window > 0 ? std::max<int64_t>(0, p0 - a.window + 1) : 0, ctx = p1 - lo + 1, ld = pad(ctx);
    const uint64_t kc_b = Align(uint64_t(Kh) * ctx * H * es), vt_b = Align(uint64_t(Kh) * H * ld * es);
    const uint64_t qh_b = Align(uint64_t(N) * Tq * H * es);
    const uint64_t s_b = Align(uint64_t(N) * Tq * ld * 4), p_b = Align(uint64_t(N) * Tq * ld * es);
    const uint64_t o_b = Align(uint64_t(N) * Tq * H * 4);
    const uint64_t need = kc_b + vt_b + qh_b + s_b + p_b + o_b;
    if (ws.size() < need) {
      GK_RETURN_IF_ERROR(Check(cudaStreamSynchronize(stream), "attention on the GPU"));
      ws = DeviceBuffer<std::byte>();
      auto grown = DeviceBuffer<std::byte>::Allocate(need);
      if (!grown.ok()) return grown.status().Wrap("the prefill attention's workspace");
      ws = std::move(*grown);
    }
    std::byte* base = ws.data();
    Op* kc = reinterpret_cast<Op*>(base);
    Op* vt = reinterpret_cast<Op*>(base + kc_b);
    Op* qh = reinterpret_cast<Op*>(base + kc_b + vt_b);
    float* S = reinterpret_cast<float*>(base + kc_b + vt_b + qh_b);
    Op* P = reinterpret_cast<Op*>(base + kc_b + vt_b + qh_b + s_b);
    float* O = reinterpret_cast<float*>(base + kc_b + vt_b + qh_b + s_b + p_b);
    const int threads = std::min(H, kThreads);
    GatherKvKernel<kPool, Op><<<dim3{unsigned(ctx), unsigned(Kh)}, threads, 0, stream>>>(
        a.k_pool, a.v_pool, a.table, lo, ctx, ld, Kh, H, a.block_size, kc, vt);
    GK_RETURN_IF_ERROR(CheckLaunch("GatherKvKernel"));
    ToHeadsKernel<Op><<<dim3{unsigned(Tq), unsigned(N)}, threads, 0, stream>>>(a.q, a.t0 + s, Tq, N, H, a.scale, qh);
    GK_RETURN_IF_ERROR(CheckLaunch("ToHeadsKernel"));
    // S (g·Tq × ctx per KV head) = Qh · Kcᵀ
    GK_RETURN_IF_ERROR(gemm.RunBatched(PerKvHead(OpDType<Op>(), int64_t(g) * Tq, ctx, H, qh, H, kc, H, S, ld, Kh)));
    MaskedSoftmaxKernel<Op><<<unsigned(int64_t(N) * Tq), kThreads, 0, stream>>>(S, Tq, ctx, ld, p0, lo, a.window, P);
    GK_RETURN_IF_ERROR(CheckLaunch("MaskedSoftmaxKernel"));
    // O (g·Tq × H per KV head) = P · V = P · Vtᵀ
    GK_RETURN_IF_ERROR(gemm.RunBatched(PerKvHead(OpDType<Op>(), int64_t(g) * Tq, H, ctx, P, ld, vt, ld, O, H, Kh)));
    FromHeadsKernel<<<dim3{unsigned(Tq), unsigned(N)}, threads, 0, stream>>>(O, a.t0 + s, Tq, N, H, a.out);
    GK_RETURN_IF_ERROR(CheckLaunch("FromHeadsKernel"));
  }
  return Status::Ok();
}

}  // namespace

Status PrefillAttention::Run(const PrefillAttentionArgs& a, GemmRunner& gemm, cudaStream_t stream) {
  if (a.T == 0) return Status::Ok();
  if (a.kv_heads < 1 || a.num_heads % a.kv_heads != 0) {
    return Status::Error(StrCat(a.num_heads, " query heads do not share ", a.kv_heads, " kv heads evenly"));
  }
  switch (a.dtype) {
    case DType::kF32: return RunTyped<KvType::kF32, float>(a, gemm, workspace_, stream);
    case DType::kF16: return RunTyped<KvType::kF16, __half>(a, gemm, workspace_, stream);
    case DType::kBF16: return RunTyped<KvType::kBF16, __nv_bfloat16>(a, gemm, workspace_, stream);
    case DType::kFp8E4m3: return RunTyped<KvType::kE4M3, __half>(a, gemm, workspace_, stream);
    case DType::kFp8E5m2: return RunTyped<KvType::kE5M2, __half>(a, gemm, workspace_, stream);
    default: return Status::Error(StrCat("paged KV cache dtype ", DTypeName(a.dtype), " is not supported on the GPU"));
  }
}

}  // namespace gk::cuda
