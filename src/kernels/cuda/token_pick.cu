// One block of 1024 threads per row. The top_k and top_p cuts are radix selections on the
// logits' order keys (kernels/token_pick.h): four passes of 8 bits each, counting (top_k) or
// weighing (top_p) the survivors in every digit's 256 bins, walked from the top until the
// target is reached. A survivor set is then "key above θ, or key θ at an index up to `last`";
// `last` comes from one pass over contiguous stretches of indices with a block scan, so ties
// are cut by index as the CPU reference does. The race is one more pass. Each warp has its own
// histogram (64 KiB of shared memory in all), which keeps atomics to one warp's lanes.
#include "kernels/cuda/token_pick.h"

#include <atomic>
#include <cstdint>

#include "kernels/cuda/cuda_memory.h"

namespace gk::cuda {
namespace {

constexpr int kThreads = 1024, kWarps = kThreads / 32, kBins = 256;
constexpr size_t kHistogramBytes = size_t(kWarps) * kBins * sizeof(double);

// The race's entrants: key above thr, or key thr at an index up to last.
struct Survivors {
  uint32_t thr = 0;
  int64_t last = INT64_MAX;
  __device__ bool operator()(uint32_t key, int64_t i) const { return key > thr || (key == thr && i <= last); }
};

struct Shared {
  double bin_total[kBins];
  double warp_sum[kWarps];
  int64_t warp_count[kWarps];
  float warp_best[kWarps];
  int64_t warp_at[kWarps];
  double total;
  int64_t count_total, last;
  float max;
  int digit;
};

__device__ inline int Lane() { return int(threadIdx.x) & 31; }
__device__ inline int Warp() { return int(threadIdx.x) >> 5; }

__device__ double BlockSum(double v, Shared& sh) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (Lane() == 0) sh.warp_sum[Warp()] = v;
  __syncthreads();
  if (Warp() == 0) {
    double r = sh.warp_sum[Lane()];
    for (int o = 16; o > 0; o >>= 1) r += __shfl_xor_sync(0xffffffffu, r, o);
    if (Lane() == 0) sh.total = r;
  }
  __syncthreads();
  const double r = sh.total;
  __syncthreads();
  return r;
}

__device__ float BlockMax(float v, Shared& sh) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (Lane() == 0) sh.warp_best[Warp()] = v;
  __syncthreads();
  if (Warp() == 0) {
    float r = sh.warp_best[Lane()];
    for (int o = 16; o > 0; o >>= 1) r = fmaxf(r, __shfl_xor_sync(0xffffffffu, r, o));
    if (Lane() == 0) sh.max = r;
  }
  __syncthreads();
  const float r = sh.max;
  __syncthreads();
  return r;
}

// The best (score, lowest index) of the block; `none` marks a thread without a candidate.
__device__ int64_t BlockArgMax(float best, int64_t at, int64_t none, Shared& sh) {
  auto better = [none](float v, int64_t i, float w, int64_t j) {  // (w, j) beats (v, i)?
    return j != none && (i == none || w > v || (w == v && j < i));
  };
  for (int o = 16; o > 0; o >>= 1) {
    const float w = __shfl_xor_sync(0xffffffffu, best, o);
    const int64_t j = __shfl_xor_sync(0xffffffffu, at, o);
    if (better(best, at, w, j)) best = w, at = j;
  }
  if (Lane() == 0) sh.warp_best[Warp()] = best, sh.warp_at[Warp()] = at;
  __syncthreads();
  if (Warp() == 0) {
    best = sh.warp_best[Lane()];
    at = sh.warp_at[Lane()];
    for (int o = 16; o > 0; o >>= 1) {
      const float w = __shfl_xor_sync(0xffffffffu, best, o);
      const int64_t j = __shfl_xor_sync(0xffffffffu, at, o);
      if (better(best, at, w, j)) best = w, at = j;
    }
    if (Lane() == 0) sh.last = at;
  }
  __syncthreads();
  const int64_t r = sh.last;
  __syncthreads();
  return r;
}

// Each thread's count's exclusive prefix over the block, and (via total) the block's sum.
__device__ int64_t BlockExclusiveScan(int64_t v, int64_t* total, Shared& sh) {
  int64_t inc = v;
  for (int o = 1; o < 32; o <<= 1) {
    const int64_t n = __shfl_up_sync(0xffffffffu, inc, o);
    if (Lane() >= o) inc += n;
  }
  if (Lane() == 31) sh.warp_count[Warp()] = inc;
  __syncthreads();
  if (Warp() == 0) {
    const int64_t w = sh.warp_count[Lane()];
    int64_t wi = w;
    for (int o = 1; o < 32; o <<= 1) {
      const int64_t n = __shfl_up_sync(0xffffffffu, wi, o);
      if (Lane() >= o) wi += n;
    }
    sh.warp_count[Lane()] = wi - w;
    if (Lane() == 31) sh.count_total = wi;
  }
  __syncthreads();
  const int64_t r = sh.warp_count[Warp()] + inc - v;
  *total = sh.count_total;
  __syncthreads();
  return r;
}

__device__ inline int64_t Clamp(int64_t v, int64_t hi) { return v < hi ? v : hi; }

template <bool kMass>
__device__ double Measure(float x, float max, float inv_t) {
  return kMass ? double(RaceWeight(x, max, inv_t)) : 1.0;
}

// Narrows s to the shortest run of its survivors, most likely first, whose measure (kMass:
// weight, else count) reaches target; at least one.
template <bool kMass>
__device__ Survivors SelectFromTop(const float* x, int64_t n, Survivors s, float max, float inv_t, double target,
                                   double* hist, Shared& sh) {
  uint32_t prefix = 0, mask = 0;
  double above = 0;  // measure of the survivors whose keys lie above the prefix's range
  double* mine = hist + Warp() * kBins;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = int(threadIdx.x); i < kWarps * kBins; i += kThreads) hist[i] = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n; i += kThreads) {
      const uint32_t key = LogitOrderKey(x[i]);
      if ((key & mask) == prefix && s(key, i)) atomicAdd(&mine[(key >> shift) & 0xFFu], Measure<kMass>(x[i], max, inv_t));
    }
    __syncthreads();
    if (threadIdx.x < kBins) {
      double t = 0;
      for (int w = 0; w < kWarps; ++w) t += hist[w * kBins + int(threadIdx.x)];
      sh.bin_total[threadIdx.x] = t;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      double acc = above, acc_before_lowest = above;
      int chosen = -1, lowest = 0;
      for (int b = kBins - 1; b >= 0; --b) {
        const double t = sh.bin_total[b];
        if (t <= 0) continue;
        if (acc + t >= target) {
          chosen = b;
          break;
        }
        lowest = b;
        acc_before_lowest = acc;
        acc += t;
      }
      if (chosen < 0) {  // rounding left the target unreached: the last bin with any measure
        chosen = lowest;
        acc = acc_before_lowest;
      }
      sh.digit = chosen;
      sh.total = acc;
    }
    __syncthreads();
    prefix |= uint32_t(sh.digit) << shift;
    mask |= 0xFFu << shift;
    above = sh.total;
    __syncthreads();
  }
  // θ = prefix. How many of its ties (equal logits, equal weights) the run needs, by index.
  const double each = kMass ? double(RaceWeight(LogitOfOrderKey(prefix), max, inv_t)) : 1.0;
  const double want = ceil((target - above) / each);
  int64_t need = want >= 1 ? (want < double(n) ? int64_t(want) : n) : 1;  // (NaN: 1)
  const int64_t chunk = (n + kThreads - 1) / kThreads;
  const int64_t lo = Clamp(int64_t(threadIdx.x) * chunk, n), hi = Clamp(lo + chunk, n);
  int64_t ties = 0;
  if (threadIdx.x == 0) sh.last = -1;  // (ordered before the reads below by the scan's barriers)
  for (int64_t i = lo; i < hi; ++i) ties += LogitOrderKey(x[i]) == prefix && s(prefix, i);
  int64_t total;
  const int64_t before = BlockExclusiveScan(ties, &total, sh);
  need = Clamp(need, total);
  if (before < need && need <= before + ties) {
    int64_t seen = before;
    for (int64_t i = lo; i < hi; ++i) {
      if (LogitOrderKey(x[i]) == prefix && s(prefix, i) && ++seen == need) {
        sh.last = i;
        break;
      }
    }
  }
  __syncthreads();
  const Survivors r{prefix, sh.last};
  __syncthreads();
  return r;
}

__global__ void __launch_bounds__(kThreads) PickTokensKernel(const float* logits, int64_t n, const TokenPick* picks,
                                                             int32_t* tokens) {
  extern __shared__ double hist[];
  __shared__ Shared sh;
  const float* x = logits + int64_t(blockIdx.x) * n;
  const TokenPick p = picks[blockIdx.x];
  float best = -INFINITY;
  int64_t at = n;  // none yet
  if (p.temperature <= 0.f) {
    for (int64_t i = threadIdx.x; i < n; i += kThreads) {  // increasing i: ties keep the first
      if (at == n || x[i] > best) best = x[i], at = i;
    }
  } else {
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) m = fmaxf(m, x[i]);
    m = BlockMax(m, sh);
    const float inv_t = 1.f / p.temperature;
    Survivors s;
    if (p.top_k > 0 && p.top_k < n) s = SelectFromTop<false>(x, n, s, m, inv_t, double(p.top_k), hist, sh);
    if (p.top_p < 1.f) {
      double kept = 0;
      for (int64_t i = threadIdx.x; i < n; i += kThreads) {
        if (s(LogitOrderKey(x[i]), i)) kept += RaceWeight(x[i], m, inv_t);
      }
      kept = BlockSum(kept, sh);
      s = SelectFromTop<true>(x, n, s, m, inv_t, double(p.top_p) * kept, hist, sh);
    }
    for (int64_t i = threadIdx.x; i < n; i += kThreads) {
      if (!s(LogitOrderKey(x[i]), i)) continue;
      const float score = RaceScore(x[i], m, inv_t, p.key, i);
      if (at == n || score > best) best = score, at = i;
    }
  }
  const int64_t r = BlockArgMax(best, at, n, sh);
  if (threadIdx.x == 0) tokens[blockIdx.x] = int32_t(r == n ? 0 : r);
}

}  // namespace

Status PickTokens(const float* logits, int64_t rows, int64_t n, const TokenPick* picks, int32_t* tokens,
                  cudaStream_t stream) {
  if (rows == 0) return Status::Ok();
  // The opt-in to 64 KiB of shared memory, once per device (not while a graph is captured,
  // which replays only launches: CudaModel runs a step eagerly before capturing it).
  static std::atomic<uint64_t> opted_in{0};
  int device = 0;
  GK_RETURN_IF_ERROR(Check(cudaGetDevice(&device), "cudaGetDevice"));
  const uint64_t bit = device < 64 ? uint64_t(1) << device : 0;
  if (bit == 0 || !(opted_in.load() & bit)) {
    GK_RETURN_IF_ERROR(Check(cudaFuncSetAttribute(PickTokensKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                  int(kHistogramBytes)), "PickTokensKernel's shared memory"));
    opted_in.fetch_or(bit);
  }
  PickTokensKernel<<<unsigned(rows), kThreads, kHistogramBytes, stream>>>(logits, n, picks, tokens);
  return CheckLaunch("PickTokensKernel");
}

}  // namespace gk::cuda
