// MatMul, RMSNorm, RoPE and the element-wise row ops. MatMul reports GB/s of weight bytes and
// of_bw (decode, T = 1, streams W once; the read bandwidth is measured right after every
// step, see PairedTimer) and GFLOP/s (2·rows·cols·T, for T = 64 the figure that matters);
// the row ops (single-threaded, data in cache) report GB/s of bytes read and written and
// elements/s.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "bench_common.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/packed_bf16.h"
#include "tensor/q8_0.h"
#include "util/anonymous_memory.h"
#include "tools/bench/ceilings.h"

namespace gk::bench {
namespace {

std::vector<float> RandomVector(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd;
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

// The read bandwidth as `gemmakit bench model` measures it (1 GiB buffer, median of 3).
void BM_ReadBandwidth(benchmark::State& state) {
  const int threads = int(state.range(0));
  double gbps = 0;
  for (auto _ : state) gbps = MeasureReadBandwidth(Pool(threads), 1ull << 30, 3);
  state.counters["GB/s"] = gbps;
}
BENCHMARK(BM_ReadBandwidth)->Arg(1)->Arg(2)->ArgName("thr")->Iterations(1)->Unit(benchmark::kMillisecond);

// The weight layouts the engine runs: 0 f32, 2 bf16 row-major, 3 bf16 packed for vdpbf16ps
// (kernels/packed_bf16.h; what bf16 models load as on AVX-512 BF16 CPUs), 4 Q8_0 panels.
MatrixView WeightsOfLayout(int layout, const std::vector<float>& wf, int64_t rows, int64_t cols, void* dst) {
  const MatrixView f32{DType::kF32, rows, cols, wf.data()};
  if (layout == 0) {
    std::memcpy(dst, wf.data(), wf.size() * sizeof(float));
    return {DType::kF32, rows, cols, dst};
  }
  if (layout == 4) {
    QuantizePanelsQ8(f32, 0, Q8Panels(rows), dst);
    return {DType::kQ8_0, rows, cols, dst};
  }
  auto* b = static_cast<uint16_t*>(dst);
  for (size_t i = 0; i < wf.size(); ++i) b[i] = F32ToBf16(wf[i]);
  MatrixView w{DType::kBF16, rows, cols, dst};
  if (layout == 3 && CanPackBf16(w)) PackBf16InPlace(&w);
  return w;
}

const char* LayoutName(int layout) {
  switch (layout) {
    case 0: return "f32";
    case 3: return "bf16 packed";
    case 4: return "q8_0";
    default: return "bf16";
  }
}

// Args: rows, cols, T, dtype (layouts above), threads. W is 4096 × 2048: 32 MiB (f32),
// 16 MiB (bf16) or 8.5 MiB (q8_0).
void BM_MatMul(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1), T = state.range(2);
  const int layout = int(state.range(3));
  const int threads = int(state.range(4));
  ThreadPool& pool = Pool(threads);
  const size_t bytes = layout == 0   ? size_t(rows * cols) * 4
                       : layout == 4 ? size_t(Q8Bytes(rows, cols))
                                     : size_t(rows * cols) * 2;
  // Copies of W rotate so that together they exceed the 32 MiB L3 four times over.
  const int copies = std::max(2, int((size_t(128) << 20) / bytes));
  const std::vector<float> wf = RandomVector(size_t(rows * cols), 1);
  std::vector<std::shared_ptr<void>> store;
  std::vector<MatrixView> views;
  for (int c = 0; c < copies; ++c) {
    store.push_back(AllocateAnonymous(bytes));  // page-aligned, as the engine's weights
    if (!store.back()) return state.SkipWithError("cannot map the weight copies");
    views.push_back(WeightsOfLayout(layout, wf, rows, cols, store.back().get()));
  }
  const std::vector<float> x = RandomVector(size_t(T * cols), 2);
  std::vector<float> y(static_cast<size_t>(T * rows));
  int64_t step = 0;
  PairedTimer timer(pool, double(bytes));
  ProbeWarmUp(pool);
  for (auto _ : state) {
    timer.StartStep();
    MatMul(views[size_t(step++ % copies)], x.data(), T, y.data(), pool);
    benchmark::DoNotOptimize(y.data());
    timer.EndStep(state);
  }
  timer.SetCounters(state);
  state.counters["GFLOP/s"] = 2.0 * double(rows * cols * T) * double(state.iterations()) / timer.step_seconds() / 1e9;
  state.SetLabel(LayoutName(layout));
}
BENCHMARK(BM_MatMul)
    ->ArgsProduct({{4096}, {2048}, {1, 16, 64}, {0, 2, 3, 4}, {1, 2}})
    ->ArgNames({"rows", "cols", "T", "dtype", "thr"})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// Own kernels (blas:0) against the sgemm route (blas:1) for T tokens over bf16 W, 2 threads:
// where the route's threshold (BlasMinTokens) belongs. GFLOP/s = 2·rows·cols·T per step.
void BM_MatMulRoute(benchmark::State& state) {
  const int64_t rows = state.range(0), cols = state.range(1), T = state.range(2);
  const bool blas = state.range(3) != 0;
  ThreadPool& pool = Pool(2);
  std::vector<uint16_t> w(size_t(rows * cols));
  const std::vector<float> wf = RandomVector(w.size(), 1);
  for (size_t i = 0; i < w.size(); ++i) w[i] = F32ToBf16(wf[i]);
  const std::vector<float> x = RandomVector(size_t(T * cols), 2);
  std::vector<float> y(size_t(T * rows));
  const MatrixView mv{DType::kBF16, rows, cols, w.data()};
  SetBlasMinTokens(blas ? 1 : 0);
  for (auto _ : state) {
    MatMul(mv, x.data(), T, y.data(), pool);
    benchmark::DoNotOptimize(y.data());
  }
  SetBlasMinTokens(BlasMinTokensDefault());
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * double(rows * cols * T) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_MatMulRoute)
    ->ArgsProduct({{2048}, {2048}, {2, 8, 16, 32, 64, 512}, {0, 1}})
    ->ArgNames({"rows", "cols", "T", "blas"})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// Rows of RmsNorm as the decoder runs them (T rows of D; weights shared): bytes = x + y.
void BM_RmsNorm(benchmark::State& state) {
  const int64_t D = state.range(0), T = state.range(1);
  const std::vector<float> x = RandomVector(size_t(T * D), 3), w = RandomVector(size_t(D), 4);
  std::vector<float> y(x.size());
  for (auto _ : state) {
    RmsNormRows(x.data(), w.data(), T, D, 1e-6f, y.data());
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GB/s"] = benchmark::Counter(8.0 * double(T * D) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetItemsProcessed(state.iterations() * T * D);
}
BENCHMARK(BM_RmsNorm)->ArgsProduct({{1152, 2816, 5376}, {1, 64}})->ArgNames({"D", "T"});

// RoPE of one token's heads: N heads of H, the full-layer case with 64 of 256 pairs rotating.
void BM_Rope(benchmark::State& state) {
  const int64_t H = state.range(0), N = state.range(1), rotated = state.range(2);
  std::vector<float> v = RandomVector(size_t(N * H), 5), inv_freq(size_t(H / 2), 0.f);
  for (int64_t i = 0; i < rotated; ++i) inv_freq[size_t(i)] = std::pow(10000.f, -2.f * float(i) / float(H));
  int64_t pos = 12345;
  for (auto _ : state) {
    for (int64_t n = 0; n < N; ++n) ApplyRope(v.data() + n * H, H, inv_freq.data(), pos);
    benchmark::DoNotOptimize(v.data());
  }
  state.counters["pairs/s"] = benchmark::Counter(double(N * rotated), benchmark::Counter::kIsIterationInvariantRate);
  state.SetItemsProcessed(state.iterations() * N * H);
}
BENCHMARK(BM_Rope)->Args({256, 8, 128})->Args({512, 8, 64})->ArgNames({"H", "N", "rotated"});

// GeGLU (T·F elements: gate, up read, out written) and the final softcap over a vocab row.
void BM_GeluTanhMul(benchmark::State& state) {
  const int64_t n = state.range(0);
  const std::vector<float> g = RandomVector(size_t(n), 6), u = RandomVector(size_t(n), 7);
  std::vector<float> out(static_cast<size_t>(n));
  for (auto _ : state) {
    GeluTanhMul(g.data(), u.data(), n, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GB/s"] = benchmark::Counter(12.0 * double(n) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_GeluTanhMul)->Arg(6912)->Arg(21504);

void BM_Softcap(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> x = RandomVector(size_t(n), 8);
  for (auto& v : x) v *= 10.f;
  std::vector<float> work(x.size());
  for (auto _ : state) {
    work = x;
    Softcap(work.data(), n, 30.f);
    benchmark::DoNotOptimize(work.data());
  }
  state.counters["GB/s"] = benchmark::Counter(8.0 * double(n) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_Softcap)->Arg(262144);

}  // namespace
}  // namespace gk::bench
