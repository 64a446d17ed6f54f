#include "kernels/cuda/attention_train.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <type_traits>

#include "kernels/attention_train_workspace.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/head_layout.cuh"
#include "kernels/cuda/kv_convert.cuh"

namespace gk::cuda {
namespace {

constexpr int kThreads = 256;

// Whether token j is visible from token i (row_start: i's row's first token).
__device__ inline bool Visible(int64_t j, int64_t i, int64_t row_start, int window) {
  return j >= row_start && j <= i && (window == 0 || j > i - window);
}

// Grid (T, N): D[h·T + i] = Σ dO[i, h, :] · O[i, h, :].
__global__ void RowDotKernel(const float* dout, const float* out, int64_t T, int N, int H, float* D) {
  const int64_t i = blockIdx.x;
  const int h = blockIdx.y;
  const float* a = dout + (i * N + h) * H;
  const float* b = out + (i * N + h) * H;
  float s = 0.f;
  for (int c = threadIdx.x; c < H; c += blockDim.x) s += a[c] * b[c];
  s = BlockSum(s);
  if (threadIdx.x == 0) D[int64_t(h) * T + i] = s;
}

// One block per score row r = h·Tq + t (query i = i0 + t of head h) over keys lo .. lo + ctx
// (rows ld apart): P = the masked softmax of S's row, and the row's log-sum-exp into lse[h·T + i].
template <class Op>
__global__ void SoftmaxForwardKernel(const float* S, int64_t Tq, int64_t ctx, int64_t ld, int64_t i0, int64_t lo,
                                     const int32_t* row_start, int window, int64_t T, Op* P, float* lse) {
  const int64_t r = blockIdx.x, h = r / Tq, i = i0 + r % Tq, rs = row_start[i];
  const float* s = S + r * ld;
  Op* p = P + r * ld;
  float m = -INFINITY;
  for (int64_t c = threadIdx.x; c < ctx; c += blockDim.x) {
    if (Visible(lo + c, i, rs, window)) m = fmaxf(m, s[c]);
  }
  m = BlockMax(m);
  float sum = 0.f;
  for (int64_t c = threadIdx.x; c < ctx; c += blockDim.x) {
    if (Visible(lo + c, i, rs, window)) sum += expf(s[c] - m);
  }
  sum = BlockSum(sum);
  const float inv = 1.f / sum;
  for (int64_t c = threadIdx.x; c < ctx; c += blockDim.x) {
    p[c] = ToOperand<Op>(Visible(lo + c, i, rs, window) ? expf(s[c] - m) * inv : 0.f);
  }
  if (threadIdx.x == 0) lse[h * T + i] = m + logf(sum);
}

// The backward pass's rows: P = exp(S − lse) where visible (else 0), dS = P ∘ (dP − D).
template <class Op>
__global__ void SoftmaxBackwardKernel(const float* S, const float* dP, int64_t Tq, int64_t ctx, int64_t ld, int64_t i0,
                                      int64_t lo, const int32_t* row_start, int window, int64_t T, const float* lse,
                                      const float* D, Op* P, Op* dS) {
  const int64_t r = blockIdx.x, h = r / Tq, i = i0 + r % Tq, rs = row_start[i];
  const float l = lse[h * T + i], d = D[h * T + i];
  for (int64_t c = threadIdx.x; c < ctx; c += blockDim.x) {
    const float p = Visible(lo + c, i, rs, window) ? expf(S[r * ld + c] - l) : 0.f;
    P[r * ld + c] = ToOperand<Op>(p);
    dS[r * ld + c] = ToOperand<Op>(p * (dP[r * ld + c] - d));
  }
}

// y_b = alpha · op(x_b) · op(w_b) + beta · y_b for each KV head b (BatchedProduct's options).
struct Product {
  int64_t M, N, K;
  const void* x;
  int64_t ldx, stride_x;
  bool x_trans;
  const void* w;
  int64_t ldw, stride_w;
  bool w_trans;
  float* y;
  int64_t ldy, stride_y;
  float alpha = 1.f, beta = 0.f;
};
Status Run(GemmRunner& gemm, DType dtype, int kv_heads, const Product& q) {
  BatchedProduct p;
  p.dtype = dtype;
  p.M = q.M, p.N = q.N, p.K = q.K;
  p.x = q.x, p.ldx = q.ldx, p.stride_x = q.stride_x, p.x_trans = q.x_trans;
  p.w = q.w, p.ldw = q.ldw, p.stride_w = q.stride_w, p.w_trans = q.w_trans;
  p.y = q.y, p.ldy = q.ldy, p.stride_y = q.stride_y;
  p.alpha = q.alpha, p.beta = q.beta;
  p.batch = kv_heads;
  return gemm.RunBatched(p);
}

uint64_t Align(uint64_t n) { return WorkspaceAlign(n); }

// The first key any query of the tile [i0, i0 + n) sees (row starts never decrease).
int64_t FirstKey(const TrainAttentionArgs& a, int64_t i0) {
  const int64_t rs = a.host_row_start[size_t(i0)];
  return a.window > 0 ? std::max<int64_t>(rs, i0 - a.window + 1) : rs;
}

// The per-tile buffers, carved from one workspace sized for the largest tile (ctx ≤ T), as
// kernels/attention_train_workspace.h counts them.
template <class Op>
struct Tile {
  Op *qh, *doh, *kc, *vc, *P, *dS;
  float *S, *dP, *oh;
  static uint64_t Bytes(const TrainAttentionArgs& a) {
    return TrainAttentionTileBytes(a.num_heads, a.kv_heads, a.head_dim, a.T, int(sizeof(Op)));
  }
  Tile(const TrainAttentionArgs& a, std::byte* base) {
    const uint64_t N = uint64_t(a.num_heads), K = uint64_t(a.kv_heads), H = uint64_t(a.head_dim);
    const uint64_t Tq = uint64_t(std::min(kTrainTileRows, a.T)), ctx = uint64_t(a.T), es = sizeof(Op);
    const uint64_t ld = uint64_t(TrainAttentionScoreStride(a.T));
    auto take = [&](uint64_t bytes) {
      std::byte* p = base;
      base += Align(bytes);
      return p;
    };
    qh = reinterpret_cast<Op*>(take(N * Tq * H * es));
    doh = reinterpret_cast<Op*>(take(N * Tq * H * es));
    kc = reinterpret_cast<Op*>(take(K * ctx * H * es));
    vc = reinterpret_cast<Op*>(take(K * ctx * H * es));
    P = reinterpret_cast<Op*>(take(N * Tq * ld * es));
    dS = reinterpret_cast<Op*>(take(N * Tq * ld * es));
    S = reinterpret_cast<float*>(take(N * Tq * ld * 4));
    dP = reinterpret_cast<float*>(take(N * Tq * ld * 4));
    oh = reinterpret_cast<float*>(take(N * Tq * H * 4));
  }
};

template <class Op>
constexpr DType OpDType() {
  return std::is_same_v<Op, float> ? DType::kF32 : DType::kBF16;
}

// Queries of the tile and K, V of its keys, head-major in the operand type.
template <class Op>
Status Gather(const TrainAttentionArgs& a, const float* rows_q, int64_t i0, int64_t Tq, int64_t lo, int64_t ctx, Op* qh,
              Op* kc, Op* vc, cudaStream_t stream) {
  const int threads = std::min(a.head_dim, kThreads);
  ToHeadsKernel<Op><<<dim3{unsigned(Tq), unsigned(a.num_heads)}, threads, 0, stream>>>(rows_q, i0, Tq, a.num_heads,
                                                                                      a.head_dim, 1.f, qh);
  GK_RETURN_IF_ERROR(CheckLaunch("ToHeadsKernel"));
  if (kc == nullptr) return Status::Ok();
  ToHeadsKernel<Op><<<dim3{unsigned(ctx), unsigned(a.kv_heads)}, threads, 0, stream>>>(a.k, lo, ctx, a.kv_heads,
                                                                                      a.head_dim, 1.f, kc);
  GK_RETURN_IF_ERROR(CheckLaunch("ToHeadsKernel"));
  ToHeadsKernel<Op><<<dim3{unsigned(ctx), unsigned(a.kv_heads)}, threads, 0, stream>>>(a.v, lo, ctx, a.kv_heads,
                                                                                      a.head_dim, 1.f, vc);
  return CheckLaunch("ToHeadsKernel");
}

// S (g·Tq × ctx per KV head, rows ld apart) = scale · Qh · Kcᵀ.
template <class Op>
Status Scores(const TrainAttentionArgs& a, GemmRunner& gemm, const Tile<Op>& w, int64_t Tq, int64_t ctx, int64_t ld) {
  const int64_t gT = int64_t(a.num_heads / a.kv_heads) * Tq, H = a.head_dim;
  return Run(gemm, OpDType<Op>(), a.kv_heads,
             Product{gT, ctx, H, w.qh, H, gT * H, false, w.kc, H, ctx * H, false, w.S, ld, gT * ld, a.scale});
}

template <class Op>
Status ForwardTyped(const TrainAttentionArgs& a, GemmRunner& gemm, std::byte* ws, cudaStream_t stream) {
  const Tile<Op> w(a, ws);
  const int64_t H = a.head_dim, g = a.num_heads / a.kv_heads;
  for (int64_t i0 = 0; i0 < a.T; i0 += kTrainTileRows) {
    const int64_t Tq = std::min(kTrainTileRows, a.T - i0), lo = FirstKey(a, i0), ctx = i0 + Tq - lo, gT = g * Tq;
    const int64_t ld = TrainAttentionScoreStride(ctx);
    GK_RETURN_IF_ERROR(Gather<Op>(a, a.q, i0, Tq, lo, ctx, w.qh, w.kc, w.vc, stream));
    GK_RETURN_IF_ERROR(Scores<Op>(a, gemm, w, Tq, ctx, ld));
    SoftmaxForwardKernel<Op><<<unsigned(int64_t(a.num_heads) * Tq), kThreads, 0, stream>>>(
        w.S, Tq, ctx, ld, i0, lo, a.row_start, a.window, a.T, w.P, a.lse);
    GK_RETURN_IF_ERROR(CheckLaunch("SoftmaxForwardKernel"));
    // O (g·Tq × H) = P · Vc (Vc stored ctx × H).
    GK_RETURN_IF_ERROR(Run(gemm, OpDType<Op>(), a.kv_heads,
                           Product{gT, H, ctx, w.P, ld, gT * ld, false, w.vc, H, ctx * H, true, w.oh, H, gT * H}));
    FromHeadsKernel<<<dim3{unsigned(Tq), unsigned(a.num_heads)}, std::min(int(H), kThreads), 0, stream>>>(
        w.oh, i0, Tq, a.num_heads, int(H), a.out);
    GK_RETURN_IF_ERROR(CheckLaunch("FromHeadsKernel"));
  }
  return Status::Ok();
}

template <class Op>
Status BackwardTyped(const TrainAttentionArgs& a, const float* dout, float* dq, float* dk, float* dv, GemmRunner& gemm,
                     std::byte* ws, cudaStream_t stream) {
  const Tile<Op> w(a, ws);
  const int64_t T = a.T, H = a.head_dim, N = a.num_heads, Kh = a.kv_heads, g = N / Kh;
  // After the tiles' buffers: D (N, T), and dK, dV head-major (K, T, H), summed over tiles.
  std::byte* rest = ws + Tile<Op>::Bytes(a);
  float* D = reinterpret_cast<float*>(rest);
  float* dkh = reinterpret_cast<float*>(rest + Align(uint64_t(N * T) * 4));
  float* dvh = dkh + Kh * T * H;
  RowDotKernel<<<dim3{unsigned(T), unsigned(N)}, 128, 0, stream>>>(dout, a.out, T, int(N), int(H), D);
  GK_RETURN_IF_ERROR(CheckLaunch("RowDotKernel"));
  GK_RETURN_IF_ERROR(Check(cudaMemsetAsync(dkh, 0, size_t(2 * Kh * T * H) * sizeof(float), stream), "cudaMemset"));
  for (int64_t i0 = 0; i0 < T; i0 += kTrainTileRows) {
    const int64_t Tq = std::min(kTrainTileRows, T - i0), lo = FirstKey(a, i0), ctx = i0 + Tq - lo, gT = g * Tq;
    const int64_t ld = TrainAttentionScoreStride(ctx);
    GK_RETURN_IF_ERROR(Gather<Op>(a, a.q, i0, Tq, lo, ctx, w.qh, w.kc, w.vc, stream));
    GK_RETURN_IF_ERROR(Gather<Op>(a, dout, i0, Tq, lo, ctx, w.doh, nullptr, nullptr, stream));
    GK_RETURN_IF_ERROR(Scores<Op>(a, gemm, w, Tq, ctx, ld));
    // dP (g·Tq × ctx) = dOh · Vcᵀ.
    GK_RETURN_IF_ERROR(Run(gemm, OpDType<Op>(), int(Kh),
                           Product{gT, ctx, H, w.doh, H, gT * H, false, w.vc, H, ctx * H, false, w.dP, ld, gT * ld}));
    SoftmaxBackwardKernel<Op><<<unsigned(N * Tq), kThreads, 0, stream>>>(w.S, w.dP, Tq, ctx, ld, i0, lo, a.row_start,
                                                                          a.window, T, a.lse, D, w.P, w.dS);
    GK_RETURN_IF_ERROR(CheckLaunch("SoftmaxBackwardKernel"));
    // dQh (g·Tq × H) = scale · dS · Kc.
    GK_RETURN_IF_ERROR(Run(gemm, OpDType<Op>(), int(Kh),
                           Product{gT, H, ctx, w.dS, ld, gT * ld, false, w.kc, H, ctx * H, true, w.oh, H, gT * H, a.scale}));
    FromHeadsKernel<<<dim3{unsigned(Tq), unsigned(N)}, std::min(int(H), kThreads), 0, stream>>>(w.oh, i0, Tq, int(N),
                                                                                             int(H), dq);
    GK_RETURN_IF_ERROR(CheckLaunch("FromHeadsKernel"));
    // dKh[lo, lo + ctx) += scale · dSᵀ · Qh and dVh[lo, lo + ctx) += Pᵀ · dOh (ctx × H): dS and
    // P are stored g·Tq × ctx (rows ld apart), Qh and dOh g·Tq × H.
    GK_RETURN_IF_ERROR(Run(gemm, OpDType<Op>(), int(Kh),
                           Product{ctx, H, gT, w.dS, ld, gT * ld, true, w.qh, H, gT * H, true, dkh + lo * H, H, T * H,
                                   a.scale, 1.f}));
    GK_RETURN_IF_ERROR(Run(gemm, OpDType<Op>(), int(Kh),
                           Product{ctx, H, gT, w.P, ld, gT * ld, true, w.doh, H, gT * H, true, dvh + lo * H, H, T * H,
                                   1.f, 1.f}));
  }
  const int threads = std::min(int(H), kThreads);
  FromHeadsKernel<<<dim3{unsigned(T), unsigned(Kh)}, threads, 0, stream>>>(dkh, 0, T, int(Kh), int(H), dk);
  GK_RETURN_IF_ERROR(CheckLaunch("FromHeadsKernel"));
  FromHeadsKernel<<<dim3{unsigned(T), unsigned(Kh)}, threads, 0, stream>>>(dvh, 0, T, int(Kh), int(H), dv);
  return CheckLaunch("FromHeadsKernel");
}

Status CheckArgs(const TrainAttentionArgs& a) {
  if (a.kv_heads < 1 || a.num_heads % a.kv_heads != 0) {
    return Status::Error(StrCat(a.num_heads, " query heads do not share ", a.kv_heads, " KV heads evenly"));
  }
  if (int64_t(a.host_row_start.size()) != a.T) {
    return Status::Error(StrCat("training attention needs each of the ", a.T, " tokens' row start on the host, got ",
                                a.host_row_start.size()));
  }
  if (a.dtype != DType::kF32 && a.dtype != DType::kBF16) {
    return Status::Error(StrCat("training attention multiplies in f32 or bf16, not ", DTypeName(a.dtype)));
  }
  return Status::Ok();
}

}  // namespace

Result<std::byte*> TrainAttention::Workspace(uint64_t bytes, cudaStream_t stream) {
  if (workspace_.size() < bytes) {
    GK_RETURN_IF_ERROR(Check(cudaStreamSynchronize(stream), "attention on the GPU"));
    workspace_ = DeviceBuffer<std::byte>();
    auto grown = DeviceBuffer<std::byte>::Allocate(bytes);
    if (!grown.ok()) return grown.status().Wrap("the training attention's workspace");
    workspace_ = std::move(*grown);
  }
  return workspace_.data();
}

Status TrainAttention::Forward(const TrainAttentionArgs& a, GemmRunner& gemm, cudaStream_t stream) {
  if (a.T == 0) return Status::Ok();
  GK_RETURN_IF_ERROR(CheckArgs(a));
  if (a.dtype == DType::kF32) {
    GK_ASSIGN_OR_RETURN(std::byte* ws, Workspace(Tile<float>::Bytes(a), stream));
    return ForwardTyped<float>(a, gemm, ws, stream);
  }
  GK_ASSIGN_OR_RETURN(std::byte* ws, Workspace(Tile<__nv_bfloat16>::Bytes(a), stream));
  return ForwardTyped<__nv_bfloat16>(a, gemm, ws, stream);
}

Status TrainAttention::Backward(const TrainAttentionArgs& a, const float* dout, float* dq, float* dk, float* dv,
                                GemmRunner& gemm, cudaStream_t stream) {
  if (a.T == 0) return Status::Ok();
  GK_RETURN_IF_ERROR(CheckArgs(a));
  const uint64_t extra = TrainAttentionBackwardExtraBytes(a.num_heads, a.kv_heads, a.head_dim, a.T);
  if (a.dtype == DType::kF32) {
    GK_ASSIGN_OR_RETURN(std::byte* ws, Workspace(Tile<float>::Bytes(a) + extra, stream));
    return BackwardTyped<float>(a, dout, dq, dk, dv, gemm, ws, stream);
  }
  GK_ASSIGN_OR_RETURN(std::byte* ws, Workspace(Tile<__nv_bfloat16>::Bytes(a) + extra, stream));
  return BackwardTyped<__nv_bfloat16>(a, dout, dq, dk, dv, gemm, ws, stream);
}

}  // namespace gk::cuda
