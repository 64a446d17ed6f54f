#include "kernels/cuda/loss_head.h"

#include <algorithm>
#include <cmath>

#include "kernels/cuda/block_reduce.cuh"
#include "kernels/loss_head_chunk.h"
#include "kernels/cuda/row_ops.h"
#include "kernels/cuda/train_ops.h"

namespace gk::cuda {
namespace {

constexpr int kThreads = 256;

__device__ double BlockSumDouble(double v) {
  __shared__ double partial[kThreads / 32];
  __shared__ double total;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    double r = threadIdx.x < kThreads / 32 ? partial[threadIdx.x] : 0.0;
    for (int o = 16; o > 0; o >>= 1) r += __shfl_xor_sync(0xffffffffu, r, o);
    if (threadIdx.x == 0) total = r;
  }
  __syncthreads();
  const double r = total;
  __syncthreads();
  return r;
}

// Per row: max −inf, sum 0, best −inf, target logit 0; arg 0.
__global__ void InitStatsKernel(float* m, float* sum, float* best, float* z_target, int64_t* arg, int64_t R) {
  for (int64_t r = blockIdx.x * int64_t(kThreads) + threadIdx.x; r < R; r += int64_t(gridDim.x) * kThreads) {
    m[r] = -INFINITY;
    sum[r] = 0.f;
    best[r] = -INFINITY;
    z_target[r] = 0.f;
    arg[r] = 0;
  }
}

// One block per row of a chunk (vocabulary ids v0 .. v0 + n): the online update of the row's
// log-sum-exp frame, best logit and target logit, as TrainingModel::LossHead does it.
__global__ void ChunkStatsKernel(const float* z, int64_t n, int64_t v0, const int32_t* targets, float* m, float* sum,
                                 float* best, float* z_target, int64_t* arg) {
  const int64_t r = blockIdx.x;
  const float* zr = z + r * n;
  float bv = -INFINITY;
  int64_t bi = n;  // none yet
  for (int64_t j = threadIdx.x; j < n; j += kThreads) {  // increasing j: ties keep the first
    if (bi == n || zr[j] > bv) bv = zr[j], bi = j;
  }
  const int64_t ca = BlockArgMax(bv, bi, n);
  const float cm = zr[ca], old = m[r], nm = fmaxf(old, cm);
  double acc = 0;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) acc += exp(double(zr[j] - nm));
  acc = BlockSumDouble(acc);
  if (threadIdx.x == 0) {
    if (cm > best[r]) best[r] = cm, arg[r] = v0 + ca;
    const int64_t tg = int64_t(targets[r]) - v0;
    if (tg >= 0 && tg < n) z_target[r] = zr[tg];
    sum[r] = float(double(sum[r]) * exp(double(old - nm)) + acc);  // exp(−inf) = 0 at the first chunk
    m[r] = nm;
  }
}

}  // namespace

Result<LossHeadResult> LossHead::Run(const LossHeadArgs& a, GemmRunner& gemm, cudaStream_t stream) {
  LossHeadResult out;
  const int64_t R = a.R, V = a.embed.rows, D = a.embed.cols;
  if (R == 0) return out;
  if (a.embed.dtype != DType::kF32 && a.embed.dtype != DType::kBF16) {
    return Status::Error(StrCat("the loss head takes a bf16 or f32 embedding, not ", DTypeName(a.embed.dtype)));
  }
  const int64_t VC = a.chunk_rows > 0 ? std::min(a.chunk_rows, V) : LossHeadChunkRows(R, V);
  if (z_.size() < size_t(R * VC)) {
    GK_RETURN_IF_ERROR(Check(cudaStreamSynchronize(stream), "the loss head on the GPU"));
    z_ = DeviceBuffer<float>();
    auto grown = DeviceBuffer<float>::Allocate(size_t(R * VC));
    if (!grown.ok()) return grown.status().Wrap("the loss head's logits");
    z_ = std::move(*grown);
  }
  if (stats_.size() < size_t(5 * R)) {
    GK_ASSIGN_OR_RETURN(stats_, DeviceBuffer<float>::Allocate(size_t(5 * R)));
    GK_ASSIGN_OR_RETURN(arg_, DeviceBuffer<int64_t>::Allocate(size_t(R)));
  }
  float* m = stats_.data();
  float* sum = m + R;
  float* best = sum + R;
  float* z_target = best + R;
  float* lse = z_target + R;
  const size_t elem = DTypeSize(a.embed.dtype);
  auto chunk = [&](int64_t v0, int64_t vc) {  // the chunk's logits into z_, capped
    const DeviceMatrix rows{a.embed.dtype, vc, D, static_cast<const std::byte*>(a.embed.data) + size_t(v0 * D) * elem};
    GK_RETURN_IF_ERROR(gemm.Run(rows, a.h, R, z_.data()));
    if (a.cap > 0.f) GK_RETURN_IF_ERROR(Softcap(z_.data(), R * vc, a.cap, stream));
    return Status::Ok();
  };
  InitStatsKernel<<<unsigned(std::min<int64_t>((R + kThreads - 1) / kThreads, 65535)), kThreads, 0, stream>>>(
      m, sum, best, z_target, arg_.data(), R);
  GK_RETURN_IF_ERROR(CheckLaunch("InitStatsKernel"));
  for (int64_t v0 = 0; v0 < V; v0 += VC) {
    const int64_t vc = std::min(VC, V - v0);
    GK_RETURN_IF_ERROR(chunk(v0, vc));
    ChunkStatsKernel<<<unsigned(R), kThreads, 0, stream>>>(z_.data(), vc, v0, a.targets, m, sum, best, z_target, arg_.data());
    GK_RETURN_IF_ERROR(CheckLaunch("ChunkStatsKernel"));
  }
  // The loss on the host, as the CPU sums it: lse = max + log(sum) in f32, Σ (lse − target) in double.
  h_stats_.resize(size_t(4 * R));
  h_arg_.resize(size_t(R));
  h_targets_.resize(size_t(R));
  GK_RETURN_IF_ERROR(Check(cudaMemcpyAsync(h_stats_.data(), m, size_t(4 * R) * sizeof(float), cudaMemcpyDeviceToHost, stream),
                           "copying the loss from the GPU"));
  GK_RETURN_IF_ERROR(Check(cudaMemcpyAsync(h_arg_.data(), arg_.data(), size_t(R) * sizeof(int64_t), cudaMemcpyDeviceToHost,
                                           stream), "copying the loss from the GPU"));
  GK_RETURN_IF_ERROR(Check(cudaMemcpyAsync(h_targets_.data(), a.targets, size_t(R) * sizeof(int32_t),
                                           cudaMemcpyDeviceToHost, stream), "copying the targets from the GPU"));
  GK_RETURN_IF_ERROR(Check(cudaStreamSynchronize(stream), "the loss head on the GPU"));
  std::vector<float> h_lse(static_cast<size_t>(R));
  for (int64_t r = 0; r < R; ++r) {
    h_lse[size_t(r)] = h_stats_[size_t(r)] + std::log(h_stats_[size_t(R + r)]);
    out.loss_sum += double(h_lse[size_t(r)]) - double(h_stats_[size_t(3 * R + r)]);
    out.correct += h_arg_[size_t(r)] == h_targets_[size_t(r)] ? 1 : 0;
  }
  if (a.dh == nullptr) return out;
  // The gradient: each chunk's logits again, turned into ∂loss/∂(pre-cap logits), times its rows.
  GK_RETURN_IF_ERROR(Check(cudaMemcpyAsync(lse, h_lse.data(), size_t(R) * sizeof(float), cudaMemcpyHostToDevice, stream),
                           "copying the log-sum-exp to the GPU"));
  for (int64_t v0 = 0; v0 < V; v0 += VC) {
    const int64_t vc = std::min(VC, V - v0);
    GK_RETURN_IF_ERROR(chunk(v0, vc));
    GK_RETURN_IF_ERROR(CrossEntropyGradRows(z_.data(), R, vc, lse, a.targets, v0, a.cap, a.scale, stream));
    const DeviceMatrix rows{a.embed.dtype, vc, D, static_cast<const std::byte*>(a.embed.data) + size_t(v0 * D) * elem};
    GK_RETURN_IF_ERROR(gemm.RunInputGrad(rows, z_.data(), R, a.dh, /*accumulate=*/v0 > 0));
  }
  GK_RETURN_IF_ERROR(Check(cudaStreamSynchronize(stream), "the loss head on the GPU"));
  return out;
}

}  // namespace gk::cuda
