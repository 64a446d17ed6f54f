// Decode attention over a KV cache: one query token, `kv_heads` KV heads each shared by
// `group` query heads, over `positions` cached positions, through the engine's own path
// (KvLayer + AttendTasks, so decode splits across threads). The caches rotate over enough
// copies (≥ 128 MiB in all) that every step reads its K/V from memory, as a real decode step
// does after the layers' weights have gone through the caches.
// Figures: GB/s of K+V bytes read, and of_bw: that rate over the read bandwidth, measured
// by reading as many bytes right after every step (PairedTimer), so both share the same
// interference on this shared machine.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "bench_common.h"
#include "kernels/attention.h"
#include "model/kv_cache.h"

namespace gk::bench {
namespace {

DType DtypeArg(int64_t a) {
  constexpr DType kDtypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kFp8E4m3, DType::kFp8E5m2};
  return kDtypes[a];
}

// Args: positions, head_dim, group, kv_heads, dtype (0 f32, 1 f16, 2 bf16, 3 fp8 e4m3,
// 4 fp8 e5m2), threads.
void BM_AttentionDecode(benchmark::State& state) {
  const int64_t positions = state.range(0);
  const int H = int(state.range(1)), group = int(state.range(2)), kv_heads = int(state.range(3));
  const DType dtype = DtypeArg(state.range(4));
  const int threads = int(state.range(5));
  ThreadPool& pool = Pool(threads);
  const double kv_bytes = 2.0 * double(positions) * kv_heads * H * double(DTypeSize(dtype));
  const int copies = std::max(2, int(std::ceil(128.0 * (1 << 20) / kv_bytes)));

  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> row(static_cast<size_t>(H)), row2(static_cast<size_t>(H));
  std::vector<KvLayer> layers(static_cast<size_t>(copies));
  for (KvLayer& kv : layers) {
    kv.capacity = positions;
    kv.kv_heads = kv_heads;
    kv.head_dim = H;
    kv.dtype = dtype;
    kv.k = KvBuffer(size_t(positions) * size_t(kv_heads) * size_t(H) * kv.ElemBytes());
    kv.v = KvBuffer(kv.k.size());
    for (int64_t p = 0; p < positions; ++p) {
      for (int h = 0; h < kv_heads; ++h) {
        for (int i = 0; i < H; ++i) row[size_t(i)] = nd(rng), row2[size_t(i)] = nd(rng);
        ConvertFromF32(dtype, row.data(), H, kv.K(p, h));  // as KvLayer::Write stores rows
        ConvertFromF32(dtype, row2.data(), H, kv.V(p, h));
      }
    }
  }
  std::vector<float> q(static_cast<size_t>(kv_heads * group * H)), out(q.size());
  for (auto& x : q) x = nd(rng) * 3.f / std::sqrt(float(H));

  int64_t step = 0;
  PairedTimer timer(pool, kv_bytes);
  ProbeWarmUp(pool);
  for (auto _ : state) {
    timer.StartStep();
    const KvLayer& kv = layers[size_t(step++ % copies)];
    AttendTasks(
        kv_heads,
        [&](int64_t h, AttentionTask& t) {
          const int n = kv.Segments(0, positions - 1, int(h), t.inline_segments);
          t.segments = {t.inline_segments, size_t(n)};
          t.query = {q.data() + h * group * H, H, group, H, 1.f, dtype};
          t.out = out.data() + h * group * H;
          t.out_stride = H;
        },
        pool);
    benchmark::DoNotOptimize(out.data());
    timer.EndStep(state);
  }
  timer.SetCounters(state);
  state.SetLabel(std::string(DTypeName(dtype)));
}

// The engine's first attention (commit 78b863b), for comparison: f32 cache, one task per
// query head (each K/V row read once per head), plain loops: score, softmax, weighted sum.
void BM_AttentionDecodeFirstVersion(benchmark::State& state) {
  const int64_t positions = state.range(0);
  const int H = int(state.range(1)), group = int(state.range(2)), kv_heads = int(state.range(3));
  const int threads = int(state.range(5));
  ThreadPool& pool = Pool(threads);
  const double kv_bytes = 2.0 * double(positions) * kv_heads * H * 4.0;
  const int copies = std::max(2, int(std::ceil(128.0 * (1 << 20) / kv_bytes)));
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<std::vector<float>> k(static_cast<size_t>(copies)), v(static_cast<size_t>(copies));
  for (int c = 0; c < copies; ++c) {
    k[size_t(c)].resize(size_t(positions * kv_heads * H));
    v[size_t(c)].resize(k[size_t(c)].size());
    for (auto& x : k[size_t(c)]) x = nd(rng);
    for (auto& x : v[size_t(c)]) x = nd(rng);
  }
  const int64_t N = int64_t(kv_heads) * group;
  std::vector<float> q(static_cast<size_t>(N * H)), out(q.size());
  for (auto& x : q) x = nd(rng) * 3.f / std::sqrt(float(H));
  std::vector<std::vector<float>> scores(static_cast<size_t>(threads), std::vector<float>(static_cast<size_t>(positions)));
  int64_t step = 0;
  PairedTimer timer(pool, kv_bytes);
  ProbeWarmUp(pool);
  for (auto _ : state) {
    timer.StartStep();
    const float* kc = k[size_t(step % copies)].data();
    const float* vc = v[size_t(step % copies)].data();
    ++step;
    pool.ParallelForDynamic(N, std::max<int64_t>(1, N / (4 * threads)), [&](int64_t b, int64_t e, int thread) {
      float* sc = scores[size_t(thread)].data();
      for (int64_t i = b; i < e; ++i) {
        const int64_t kh = i / group;
        const float* qv = q.data() + i * H;
        for (int64_t j = 0; j < positions; ++j) {
          const float* kr = kc + (j * kv_heads + kh) * H;
          float dot = 0.f;
          for (int d = 0; d < H; ++d) dot += qv[d] * kr[d];
          sc[j] = dot;
        }
        float m = -INFINITY, sum = 0.f;
        for (int64_t j = 0; j < positions; ++j) m = std::max(m, sc[j]);
        for (int64_t j = 0; j < positions; ++j) sum += (sc[j] = std::exp(sc[j] - m));
        for (int64_t j = 0; j < positions; ++j) sc[j] /= sum;
        float* o = out.data() + i * H;
        std::fill(o, o + H, 0.f);
        for (int64_t j = 0; j < positions; ++j) {
          const float* vr = vc + (j * kv_heads + kh) * H;
          for (int d = 0; d < H; ++d) o[d] += sc[j] * vr[d];
        }
      }
    });
    benchmark::DoNotOptimize(out.data());
    timer.EndStep(state);
  }
  timer.SetCounters(state);
  state.SetLabel("F32 first version");
}

void AttentionArgs(benchmark::internal::Benchmark* b) {
  for (int dt : {0, 1, 2, 3, 4}) {
    for (int threads : {1, 2}) {
      // Full layer: 16k positions, head dim 512 (Gemma 4 global layers).
      b->Args({16384, 512, 2, 1, dt, threads});
      b->Args({16384, 512, 8, 1, dt, threads});
      b->Args({16384, 512, 8, 4, dt, threads});
      // Sliding layer: its 1024-position window, head dim 256.
      b->Args({1024, 256, 2, 1, dt, threads});
      b->Args({1024, 256, 8, 1, dt, threads});
      b->Args({1024, 256, 2, 16, dt, threads});
    }
  }
  b->ArgNames({"pos", "H", "group", "kvh", "dtype", "thr"});
}

BENCHMARK(BM_AttentionDecode)->Apply(AttentionArgs)->UseManualTime()->Unit(benchmark::kMicrosecond);

void FirstVersionArgs(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2}) {
    b->Args({16384, 512, 8, 1, 0, threads});
    b->Args({1024, 256, 2, 1, 0, threads});
  }
  b->ArgNames({"pos", "H", "group", "kvh", "dtype", "thr"});
}
BENCHMARK(BM_AttentionDecodeFirstVersion)->Apply(FirstVersionArgs)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace gk::bench
